package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
)

// oneNode starts an embedded etcd and one in-process meshnode; both stop
// when the test ends.
func oneNode(t *testing.T) (etcdURL string, n *node.Node) {
	t.Helper()
	srv := etcdtest.Single(t)
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.Name = "n1"
	cfg.EtcdEndpoints = []string{srv.Endpoint()}
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	cfg.LeaseTTL = 2 * time.Second
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err = node.New(cfg, node.WithRegistry(reg), node.WithListener(lis), node.WithMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Stop(sctx)
	})
	return srv.Endpoint(), n
}

// orphan writes a record of obj owned by an owner that then goes away, as if
// its node had crashed with it.
func orphan(t *testing.T, etcdURL string, obj keyspace.Object) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd := etcdtest.Client(t, etcdURL)
	keys := keyspace.Default()
	rid := wire.NewRoutingID().Hex()
	k, err := lease.Start(ctx, etcd, keys, lease.Config{
		OwnerID: "ghost", TTL: 5 * time.Second,
		Descriptor: lease.Descriptor{RoutingID: rid, Address: "127.0.0.1:1", State: lease.StateDraining,
			ApplicationVersion: "1", StartedUnixMs: time.Now().UnixMilli()},
	})
	if err != nil {
		t.Fatalf("lease.Start: %v", err)
	}
	res, err := authority.New(etcd, keys).Activate(ctx, authority.ActivateRequest{
		Object: obj, Owner: authority.OwnerRef{ID: "ghost", Generation: k.Generation()},
		Node: authority.NodeRef{RoutingID: rid, Address: "127.0.0.1:1"},
	})
	if err != nil || !res.Won {
		t.Fatalf("activate %s: won=%v err=%v", obj, res.Won, err)
	}
	if err := k.Close(ctx); err != nil {
		t.Fatalf("keeper close: %v", err)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentAddr is a loopback address that takes connections and never
// answers; it closes when the test ends.
func silentAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return l.Addr().String()
}

// TestCall runs `meshctl call` against a real node and a real etcd.
func TestCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and a node")
	}
	ep, n := oneNode(t)
	gw := []string{"--node", n.Address()}
	served := fmt.Sprintf("served by %s objectGeneration=1 authorityGeneration=1\n", n.Self())

	t.Run("table", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"call", "actor/counter/x", "add", "2"}, `{"value":2}` + "\n"},
			{[]string{"call", "actor/counter/x", "get"}, `{"value":2}` + "\n"},
			// Flags after the positional arguments, a negative argument after "--".
			{[]string{"call", "actor/counter/x", "add", "--timeout", "5s", "--", "-1"}, `{"value":1}` + "\n"},
			{[]string{"call", "actor/list/l", "append", "a b"}, `{"length":1}` + "\n"},
			{[]string{"call", "actor/list/l", "read"}, `{"items":["a b"]}` + "\n"},
		} {
			r := meshctl(nil, append(gw, tc.args...)...)
			// stdout is the reply alone (| jq . works); who served it, on stderr.
			if r.code != 0 || r.stderr != served || r.stdout != tc.want {
				t.Errorf("meshctl %v: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", tc.args, r.code, r.stderr, r.stdout, tc.want)
			}
		}
	})

	t.Run("op-id and json", func(t *testing.T) {
		op := wire.NewOperationID().String()
		var first callOutput
		for i := range 3 {
			args := append(append([]string{}, gw...), "-o", "json", "call", "actor/counter/x", "add", "10", "--op-id", op)
			r := meshctl(nil, args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("meshctl %v: %+v", args, r)
			}
			var got callOutput
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
				t.Fatalf("-o json: %v:\n%s", err, r.stdout)
			}
			var payload bytes.Buffer
			_ = json.Compact(&payload, got.Payload)
			if got.Object != "actor/counter/x" || got.Method != "add" || got.OperationID != op ||
				payload.String() != `{"value":11}` || got.Fence.Owner != n.Self() ||
				got.Fence.ObjectGeneration != 1 || got.Fence.AuthorityGeneration != 1 || got.StoreVersion <= 0 ||
				got.Replayed != (i > 0) {
				t.Errorf("call %d with op %s: %s", i, op, r.stdout)
			}
			if i == 0 {
				first = got
			} else if got.StoreVersion != first.StoreVersion {
				t.Errorf("replay has store version %d, first %d", got.StoreVersion, first.StoreVersion)
			}
		}
		// Table mode says so too; the counter was added to once.
		r := meshctl(nil, append(gw, "call", "--op-id", op, "actor/counter/x", "add", "10")...)
		if want := strings.TrimSuffix(served, "\n") + " (replayed)\n"; r.code != 0 || r.stdout != `{"value":11}`+"\n" || r.stderr != want {
			t.Errorf("replay in table mode: %+v, want stderr %q", r, want)
		}
		r = meshctl(nil, append(gw, "call", "actor/counter/x", "get")...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, `{"value":11}`+"\n") {
			t.Errorf("after 4 sends of one add: %+v", r)
		}
	})

	t.Run("etcd endpoints", func(t *testing.T) {
		for _, tc := range []struct {
			env  map[string]string
			args []string
		}{
			{nil, []string{"--etcd-endpoints", ep, "call", "actor/counter/x", "get"}},
			// The environment mirror; --node points nowhere and is not used.
			{map[string]string{"MESHCTL_ETCD_ENDPOINTS": ep, "MESHCTL_NODE": closedAddr(t)}, []string{"call", "actor/counter/x", "get"}},
		} {
			r := meshctl(tc.env, tc.args...)
			if want := `{"value":11}` + "\n"; r.code != 0 || r.stderr != served || r.stdout != want {
				t.Errorf("meshctl %v (env %v): %+v, want stdout %q", tc.args, tc.env, r, want)
			}
		}
	})

	t.Run("state lost", func(t *testing.T) {
		obj := keyspace.Actor("counter", "lost")
		orphan(t, ep, obj)
		r := meshctl(nil, append(gw, "call", obj.String(), "add", "1")...)
		line, rest, _ := strings.Cut(r.stderr, "\n")
		if r.code != 1 || r.stdout != "" || rest != "" || !strings.HasPrefix(line, "meshctl: state_lost: ") ||
			!strings.Contains(line, "object generation 2") {
			t.Errorf("first call after the owner died: %+v", r)
		}
		// The re-created object serves, from a fresh state.
		r = meshctl(nil, append(gw, "call", obj.String(), "add", "1")...)
		want := `{"value":1}` + "\n"
		if r.code != 0 || r.stdout != want || r.stderr != fmt.Sprintf("served by %s objectGeneration=2 authorityGeneration=2\n", n.Self()) {
			t.Errorf("second call: %+v, want stdout %q", r, want)
		}
	})

	t.Run("errors", func(t *testing.T) {
		dead, silent := closedAddr(t), silentAddr(t)
		op := wire.NewOperationID().String()
		for _, tc := range []struct {
			env    map[string]string
			args   []string
			code   int
			stderr string // a regexp of the whole line
		}{
			{nil, append(gw, "call", "actor/counter/x", "explode"), 1, `meshctl: unknown_method: .*explode.*\(its methods: add, get, delete, remind, unremind\)`},
			{nil, append(gw, "call", "actor/counter/x", "add", "one"), 1, `meshctl: invalid_argument: .*`},
			{nil, append(gw, "call", "actor/nosuch/x", "get"), 1, `meshctl: unknown_type: .*"nosuch".*the cluster's types: .*bank.*counter.*`},
			// A name that does not parse is not sent: exit status 2.
			{nil, append(gw, "call", "thing/x", "get"), 2, `meshctl: invalid_argument: OBJECT: keyspace: invalid name: "thing/x" \(want actor/<type>/<id> or group/<id>\)`},
			{nil, append(gw, "call", "actor/counter/x"), 2, `meshctl: usage: meshctl call: requires OBJECT and METHOD, received 1 arg\(s\) \(see meshctl --help\)`},
			{nil, append(gw, "call"), 2, `meshctl: usage: meshctl call: requires OBJECT and METHOD, received 0 arg\(s\) \(see meshctl --help\)`},
			{nil, append(gw, "call", "actor/counter/x", "get", "--op-id", "nope"), 2, `meshctl: usage: --op-id: wire: invalid operation id: .*`},
			// A UUIDv4 is not an operation id.
			{nil, append(gw, "call", "actor/counter/x", "get", "--op-id", "4b1e5bd3-5f5e-4a4b-9c1e-0d3e8f0a2b6c"), 2, `meshctl: usage: --op-id: wire: invalid operation id: operation id is not a UUIDv7 .*`},
			{nil, []string{"--node", "", "call", "actor/counter/x", "get"}, 2, `meshctl: invalid_argument: --node: "" is not host:port like 127.0.0.1:7100: missing port in address`},
			{nil, append(gw, "call", "actor/counter/x", "add", "-5"), 2, `meshctl: usage: unknown shorthand flag: '5' in -5 .*`},
			// No etcd there: nothing was sent, so no operation id to retry with.
			{nil, []string{"--etcd-endpoints", "http://" + dead, "--timeout", "300ms", "call", "actor/counter/x", "get"}, 1,
				`meshctl: unavailable: etcd http://` + dead + `: context deadline exceeded`},
			// No node there: the connection is refused, nothing was sent;
			// the answer comes at once (long before the 1 h deadline) and
			// says what to do.
			{nil, []string{"--node", dead, "--timeout", "1h", "call", "actor/counter/x", "add", "1", "--op-id", op}, 1,
				`meshctl: unavailable: client: no node at ` + dead + `: the connection was refused, nothing was sent: pass --node or --etcd-endpoints`},
			// Nobody answers: the outcome is unknown, the line names the operation id to retry with.
			{nil, []string{"--node", silent, "--timeout", "300ms", "call", "actor/counter/x", "add", "1", "--op-id", op}, 1,
				`meshctl: deadline_exceeded: call deadline passed \(last: .*\); outcome unknown: retry with --op-id ` + op},
			{map[string]string{"MESHCTL_NODE": silent, "MESHCTL_TIMEOUT": "200ms"}, []string{"call", "actor/counter/x", "get"}, 1,
				`meshctl: deadline_exceeded: .*; outcome unknown: retry with --op-id [0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}`},
		} {
			r := meshctl(tc.env, tc.args...)
			line, rest, _ := strings.Cut(r.stderr, "\n")
			if r.code != tc.code || r.stdout != "" || rest != "" || !regexp.MustCompile(`^`+tc.stderr+`$`).MatchString(line) {
				t.Errorf("meshctl %v: exit %d, stdout %q, stderr %q; want exit %d, stderr ~ %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stderr)
			}
		}
		// The add retried with the operation id of the one that timed out runs once.
		for range 2 {
			if r := meshctl(nil, append(gw, "call", "actor/counter/x", "add", "1", "--op-id", op)...); r.code != 0 || !strings.HasPrefix(r.stdout, `{"value":12}`) {
				t.Errorf("retry with --op-id %s: %+v", op, r)
			}
		}
	})
}
