package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The client's control protocol: the bench writes one Command a line on
// stdin and reads one Answer a line on stdout, in turn. internal/bench
// (peers_proc.go) has the same types; the measurements (measure.go) are
// the ones the bench makes of meshloc, written again here because this
// module cannot import meshloc's.

// Command is one thing the bench asks of the client.
type Command struct {
	// Op: "wait" (until Members members serve), "latency" (N serial adds
	// of 1 to Prefix+"0"), "rate" (Inflight callers for Millis, caller w
	// adding 1 to counter w mod Objects), "activate" (one add of 1 to
	// each of Objects new counters, Inflight in flight), "load_start"
	// (Inflight callers adding 1 to counters chosen at random among
	// Objects until load_stop), "load_status" (how it goes), "load_stop", "read" (an add of 0 to each
	// of Objects counters: their values), "version".
	Op       string `json:"op"`
	Members  int    `json:"members,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Objects  int    `json:"objects,omitempty"`
	N        int    `json:"n,omitempty"`
	Inflight int    `json:"inflight,omitempty"`
	Millis   int64  `json:"ms,omitempty"`
}

// Answer is the client's answer to one Command.
type Answer struct {
	Error       string       `json:"error,omitempty"`
	LatenciesNs []int64      `json:"latencies_ns,omitempty"`
	OK          int64        `json:"ok,omitempty"`
	Failed      int64        `json:"failed,omitempty"`
	ElapsedNs   int64        `json:"elapsed_ns,omitempty"`
	Load        *LoadResult  `json:"load,omitempty"`
	Values      []int64      `json:"values,omitempty"`
	Owners      []string     `json:"owners,omitempty"`
	Peer        *Description `json:"peer,omitempty"`
}

// client runs a client member and answers the bench's commands until
// stdin ends.
func client(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	endpoint := fs.String("etcd", "", "the etcd client URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" {
		return errors.New("--etcd is required")
	}
	c, err := newCluster(*endpoint, false)
	if err != nil {
		return err
	}
	// No Shutdown at the end: this version's Cluster.Shutdown assumes a
	// member's gossip and panics on a client; the process exits.
	c.StartClient()
	add := func(object string, delta int64) (int64, error) {
		r, err := c.Request(object, counterKind, wrapperspb.Int64(delta))
		if v, ok := r.(*wrapperspb.Int64Value); ok {
			return v.GetValue(), nil
		}
		if err == nil {
			err = fmt.Errorf("answered %T", r)
		}
		return 0, err
	}
	var load *loader
	sc := bufio.NewScanner(in)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		var cmd Command
		var a Answer
		if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
			a.Error = err.Error()
		} else if err := do(c, add, &load, cmd, &a); err != nil {
			a.Error = err.Error()
		}
		if err := enc.Encode(a); err != nil {
			return err
		}
	}
	if load != nil {
		load.stop()
	}
	return sc.Err()
}

func do(c *cluster.Cluster, add adder, load **loader, cmd Command, a *Answer) error {
	switch cmd.Op {
	case "wait":
		deadline := time.Now().Add(time.Minute)
		for c.MemberList.Length() != cmd.Members {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d members after 1 min, want %d", c.MemberList.Length(), cmd.Members)
			}
			time.Sleep(20 * time.Millisecond)
		}
	case "latency":
		lat, failed := latency(add, cmd.Prefix+"0", cmd.N)
		a.Failed = failed
		for _, d := range lat {
			a.LatenciesNs = append(a.LatenciesNs, int64(d))
		}
	case "rate":
		ok, failed, el := rate(add, cmd.Prefix, cmd.Objects, cmd.Inflight, time.Duration(cmd.Millis)*time.Millisecond)
		a.OK, a.Failed, a.ElapsedNs = ok, failed, int64(el)
	case "activate":
		el, failed := activate(add, cmd.Prefix, cmd.Objects, cmd.Inflight)
		a.ElapsedNs, a.Failed = int64(el), failed
	case "load_start":
		if *load != nil {
			return errors.New("a load runs already")
		}
		*load = startLoad(add, cmd.Prefix, cmd.Objects, cmd.Inflight)
	case "load_status":
		if *load == nil {
			return errors.New("no load runs")
		}
		r := (*load).status()
		a.Load = &r
	case "load_stop":
		if *load == nil {
			return errors.New("no load runs")
		}
		r := (*load).stop()
		*load = nil
		a.Load = &r
	case "read":
		a.Values = read(add, cmd.Prefix, cmd.Objects)
	case "owners":
		for i := range cmd.Objects {
			pid := c.Get(cmd.Prefix+strconv.Itoa(i), counterKind)
			if pid == nil {
				return fmt.Errorf("%s%d has no activation", cmd.Prefix, i)
			}
			a.Owners = append(a.Owners, pid.GetAddress())
		}
	case "version":
		d := describe()
		a.Peer = &d
	default:
		return fmt.Errorf("no op %q", cmd.Op)
	}
	return nil
}
