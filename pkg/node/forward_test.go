package node_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A gateway's calls reach the owner on one forward stream, many in
// flight at once, each executed once; a call larger than a stream's share
// goes as a unary call beside it. An owner that stops ends the stream (the
// gateway's calls in flight get unavailable and retry): its stop does not
// wait for the gateway to go away.
func TestGatewayForwardsOnOneStream(t *testing.T) {
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	owner := m.add(t, "n1")
	gw := m.add(t, "gw", func(_ int, c *node.Config) { c.Weight = 0 })
	call := func(obj, method string, args ...[]byte) *pb.CallReply {
		op := wire.NewOperationID()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return gw.Call(ctx, &pb.CallRequest{Version: wire.Version, Object: obj, Method: method, Args: args, OperationId: op[:]})
	}
	const objects, perObject = 8, 50
	var wg sync.WaitGroup
	errs := make(chan string, objects*perObject)
	for o := range objects {
		for range perObject {
			wg.Go(func() {
				if rep := call(fmt.Sprintf("actor/counter/fwd%d", o), "add", []byte("1")); rep.GetCode() != pb.Code_CODE_OK {
					errs <- fmt.Sprintf("%v %s", rep.GetCode(), rep.GetMessage())
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("call through the gateway: %s", e)
	}
	for o := range objects {
		rep := call(fmt.Sprintf("actor/counter/fwd%d", o), "get")
		if rep.GetCode() != pb.Code_CODE_OK || string(rep.GetPayload()) != fmt.Sprintf(`{"value":%d}`, perObject) {
			t.Fatalf("counter %d: %v %q, want %d", o, rep.GetCode(), rep.GetPayload(), perObject)
		}
	}
	if s := m.metric(t, owner, "meshloc_forward_streams"); s != 1 {
		t.Fatalf("owner serves %v forward streams, want 1 (the gateway's)", s)
	}
	big := bytes.Repeat([]byte("x"), 100<<10)
	if rep := call("actor/list/fwdbig", "append", big); rep.GetCode() != pb.Code_CODE_OK {
		t.Fatalf("a 100 KiB call through the gateway: %v %s", rep.GetCode(), rep.GetMessage())
	}
	if rep := call("actor/list/fwdbig", "read"); rep.GetCode() != pb.Code_CODE_OK || !bytes.Contains(rep.GetPayload(), big[:1024]) {
		t.Fatalf("read back: %v %d bytes", rep.GetCode(), len(rep.GetPayload()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := owner.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the owner's stop waited for the gateway's forward stream until it was forced")
	}
}

// A client's calls to a node share one call stream (CallService.CallStream),
// many in flight at once, each executed once; a large call goes unary beside
// it; a client that closes ends its stream at the node.
func TestClientCallsOnOneStream(t *testing.T) {
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	n1 := m.add(t, "n1")
	c := newClient(t, client.Config{Nodes: []string{n1.Address()}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const callers, perCaller = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, callers*perCaller)
	for w := range callers {
		wg.Go(func() {
			for range perCaller {
				if _, err := c.Call(ctx, fmt.Sprintf("actor/counter/cs%d", w%4), "add", "1"); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a call on the stream: %v", err)
	}
	for o := range 4 {
		r, err := c.Call(ctx, fmt.Sprintf("actor/counter/cs%d", o), "get")
		if want := fmt.Sprintf(`{"value":%d}`, callers/4*perCaller); err != nil || string(r.Payload) != want {
			t.Fatalf("counter %d: %v %v, want %s", o, r, err, want)
		}
	}
	if s := m.metric(t, n1, "meshloc_forward_streams"); s != 1 {
		t.Fatalf("node serves %v call streams, want 1 (the client's)", s)
	}
	big := string(bytes.Repeat([]byte("x"), 100<<10))
	if _, err := c.Call(ctx, "actor/list/csbig", "append", big); err != nil {
		t.Fatalf("a 100 KiB call: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.metric(t, n1, "meshloc_forward_streams") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the node still serves the closed client's call stream")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
