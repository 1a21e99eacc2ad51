// Command peers is the Proto.Actor Go side of `meshctl bench --only peers`:
// a Proto.Actor cluster of the bench's meshloc cluster's shape (members
// on loopback hosting a counter grain, a client member calling them),
// run as processes the bench starts and talks to. It lives in a module of
// its own so that meshloc's module does not depend on protoactor-go.
//
//	peers member --etcd URL --name NAME   a member hosting the counter kind;
//	                                      prints "ready ADDRESS", leaves the
//	                                      cluster gracefully on SIGTERM
//	peers client --etcd URL               a client member; one JSON command a
//	                                      line on stdin, one JSON answer a
//	                                      line on stdout (client.go)
//	peers version                         the Proto.Actor version and
//	                                      configuration, as JSON
//
// Every member uses Proto.Actor's defaults: the etcd cluster provider (its
// members' keys under /protoactor, a 3 s lease), the disthash identity
// lookup, remote over gRPC, a 5 s grain request timeout. Logs go to stderr
// at warn level, as the bench's meshnodes log.
package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Names shared by members and clients.
const (
	clusterName = "bench"
	counterKind = "counter"
	etcdBaseKey = "/protoactor"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peers member|client|version [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "member":
		err = member(os.Args[2:])
	case "client":
		err = client(os.Args[2:], os.Stdin, os.Stdout)
	case "version":
		err = json.NewEncoder(os.Stdout).Encode(describe())
	default:
		err = fmt.Errorf("no command %q (member, client, version)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "peers %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// Description says what the peer is: the bench prints it beside the
// figures.
type Description struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	Go      string `json:"go"`
	Config  string `json:"config"`
}

func describe() Description {
	d := Description{Module: "github.com/asynkron/protoactor-go", Version: "unknown", Config: "etcd cluster provider (lease 3 s), disthash identity lookup, remote gRPC on loopback, grain request timeout 5 s, counter grain (Int64Value add, replies the value), defaults otherwise"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		d.Go = bi.GoVersion
		for _, m := range bi.Deps {
			if m.Path == d.Module {
				d.Version = m.Version
			}
		}
	}
	return d
}

// counter is the grain: an int64 that an Int64Value adds to, answered
// with the new value (meshloc's counter add).
type counter struct{ v int64 }

func (c *counter) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*wrapperspb.Int64Value); ok {
		c.v += m.GetValue()
		ctx.Respond(wrapperspb.Int64(c.v))
	}
}

// newCluster configures a member (hosting counters) or a client member of
// the cluster behind the etcd at endpoint.
func newCluster(endpoint string, hosting bool) (*cluster.Cluster, error) {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}))
	provider, err := etcd.NewWithConfig(etcdBaseKey, clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	var kinds []*cluster.Kind
	if hosting {
		kinds = append(kinds, cluster.NewKind(counterKind, actor.PropsFromProducer(func() actor.Actor { return &counter{} })))
	}
	cfg := cluster.Configure(clusterName, provider, disthash.New(), remote.Configure("127.0.0.1", 0), cluster.WithKinds(kinds...))
	return cluster.New(system, cfg), nil
}
