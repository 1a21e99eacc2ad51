package node_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func adminClient(t *testing.T, addr string) rpcpb.AdminServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rpcpb.NewAdminServiceClient(cc)
}

// TestWatchEvents: a watcher of the source hears the stats, then the
// relocation start and its end with both timelines' steps; bad versions
// and one watcher too many are refused with typed codes.
func TestWatchEvents(t *testing.T) {
	m := startMesh(t, 2)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Call(ctx, "actor/counter/w", "add", "1"); err != nil {
		t.Fatal(err)
	}
	src := m.owner(t, "actor/counter/w")
	admin := adminClient(t, src.Address())

	// Refused: another version; a watcher past the bound.
	bad, err := admin.WatchEvents(ctx, &pb.WatchEventsRequest{Version: 7})
	if err == nil {
		_, err = bad.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("version 7: %v, want InvalidArgument", err)
	}
	var streams []grpc.ServerStreamingClient[pb.NodeEvent]
	wctx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	for range node.MaxEventWatchers {
		s, err := admin.WatchEvents(wctx, &pb.WatchEventsRequest{Version: node.WatchEventsVersion})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := s.Recv(); err != nil || ev.GetStats() == nil {
			t.Fatalf("first event %v, %v: want the stats", ev, err)
		}
		streams = append(streams, s)
	}
	extra, err := admin.WatchEvents(ctx, &pb.WatchEventsRequest{Version: node.WatchEventsVersion})
	if err == nil {
		_, err = extra.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("watcher %d: %v, want ResourceExhausted", node.MaxEventWatchers+1, err)
	}
	s := streams[0]

	st, err := src.Relocate(ctx, "actor/counter/w", node.RelocateOptions{})
	if err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("relocate: %v %v", st, err)
	}
	var started, ended *pb.RelocationStatus
	for ended == nil {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		r := ev.GetRelocation()
		if r == nil || string(r.GetRelocationId()) != string(st.GetRelocationId()) {
			continue
		}
		if r.GetOutcome() == "" {
			started = r
		} else {
			ended = r
		}
	}
	if started == nil || started.GetRole() != "source" || started.GetObject() != "actor/counter/w" {
		t.Errorf("started event %v", started)
	}
	var steps []string
	last := int64(0)
	for _, mk := range ended.GetTimeline() {
		steps = append(steps, mk.GetStep())
		if mk.GetUnixUs() < last {
			t.Errorf("timeline goes back in time: %v", ended.GetTimeline())
		}
		last = mk.GetUnixUs()
	}
	for _, want := range []string{"intent", "seal", "state", "cutover", "commit", "done"} {
		if !slices.Contains(steps, want) {
			t.Errorf("source timeline %v lacks %s", steps, want)
		}
	}
	if steps[0] != "intent" || steps[len(steps)-1] != "done" {
		t.Errorf("source timeline %v: want intent first, done last", steps)
	}
	// The target keeps its side's timeline in its list.
	dst := m.owner(t, "actor/counter/w")
	var tgt *pb.RelocationStatus
	for _, x := range dst.Relocations() {
		if x.GetRole() == "target" && string(x.GetRelocationId()) == string(st.GetRelocationId()) {
			tgt = x
		}
	}
	if tgt == nil || len(tgt.GetTimeline()) < 4 || tgt.GetTimeline()[0].GetStep() != "state" {
		t.Errorf("target status %v", tgt)
	}
	stopWatchers()
	for _, s := range streams {
		for {
			if _, err := s.Recv(); err != nil {
				if err != io.EOF && status.Code(err) != codes.Canceled {
					t.Errorf("watcher ended with %v", err)
				}
				break
			}
		}
	}
}
