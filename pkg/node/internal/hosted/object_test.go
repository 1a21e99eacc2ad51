package hosted

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node/config"
	"github.com/meshloc/meshloc/pkg/node/nodemetrics"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// An object runs against an in-memory node (fakeNode): the seam is all it
// needs to serve, answer retries from its table, refuse without a lease, and
// redirect once closed.

type counter struct{ n int }

func (c *counter) Handle(_ actor.Context, method string, _ [][]byte) ([]byte, error) {
	if method != "inc" {
		return nil, actor.ErrUnknownMethod
	}
	c.n++
	return []byte(strconv.Itoa(c.n)), nil
}
func (c *counter) Snapshot() ([]byte, error) { return []byte(strconv.Itoa(c.n)), nil }
func (c *counter) Restore(b []byte) (err error) {
	c.n, err = strconv.Atoi(string(b))
	return err
}

// fakeNode is the node as an object sees it, in memory.
type fakeNode struct {
	mu       sync.Mutex
	lease    lease.Status
	unhosted []*Object
}

func (f *fakeNode) LeaseStatus(time.Time) lease.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lease
}
func (f *fakeNode) NotHere(obj keyspace.Object) *pb.CallReply {
	return &pb.CallReply{Code: pb.Code_CODE_NOT_OWNER, Message: obj.String() + " is not hosted here"}
}
func (f *fakeNode) NotOwner(authority.Snapshot) *pb.CallReply {
	return &pb.CallReply{Code: pb.Code_CODE_NOT_OWNER}
}
func (f *fakeNode) NotOwnerAt(keyspace.Object, record.Location) *pb.CallReply {
	return &pb.CallReply{Code: pb.Code_CODE_NOT_OWNER}
}
func (f *fakeNode) NoSpaceReply(msg string) *pb.CallReply {
	return &pb.CallReply{Code: pb.Code_CODE_RESOURCE_EXHAUSTED, Message: msg}
}
func (f *fakeNode) Unroute(*Work)                              {}
func (f *fakeNode) TakeRoute(uint64) *Work                     { return nil }
func (f *fakeNode) HandOver(w *Work, _ string) *pb.CallRequest { return w.Req }
func (f *fakeNode) RelayReply(*Work, *pb.CallReply)            {}
func (f *fakeNode) Unhost(h *Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unhosted = append(f.unhosted, h)
}
func (f *fakeNode) NoteChange()                                 {}
func (f *fakeNode) RememberMove(string, string)                 {}
func (f *fakeNode) CheckSender(*pb.MessageSender) *pb.CallReply { return nil }
func (f *fakeNode) SetFull(bool)                                {}
func (f *fakeNode) SendMessage(actor.OutMessage, *pb.MessageSender) *pb.CallReply {
	return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE}
}
func (f *fakeNode) DeliverPushes(session.Ref, *pb.SessionDelivery) (*pb.SessionDeliveryReply, error) {
	return &pb.SessionDeliveryReply{}, nil
}
func (f *fakeNode) SessionSeal(context.Context, session.Ref, *pb.SessionSealRequest) pb.Code {
	return pb.Code_CODE_OK
}
func (f *fakeNode) SessionRoute(session.Ref, *pb.SessionRouteRequest) pb.Code { return pb.Code_CODE_OK }

func newTestObject(t *testing.T, node *fakeNode) (*Object, *sync.WaitGroup) {
	t.Helper()
	cfg := config.Default()
	var work sync.WaitGroup
	env := NewEnv(Deps{Config: &cfg, Metrics: nodemetrics.New(prometheus.NewRegistry()), Log: zerolog.Nop(), Clock: clock.Real(),
		Work: &work, Self: authority.OwnerRef{ID: "n1", Generation: 1}, RoutingID: wire.NewRoutingID(), Life: context.Background(),
		Stopping: make(chan struct{}), Outboxes: &OutboxSet{}, Traffic: NewTraffic(16, time.Minute, 1),
		KnownGeneration: func(r *pb.CallRequest) int64 { return r.GetKnownObjectGeneration() }, Node: node})
	obj := keyspace.Object{Kind: keyspace.KindActor, Type: "counter", ID: "a"}
	typ := &actor.Type{Name: "counter", New: func() actor.Object { return &counter{} }}
	h := New(env, obj, typ)
	h.Install(authority.Snapshot{Object: obj, Record: record.Record{Kind: obj.Kind, Type: obj.Type, ObjectGeneration: 1,
		AuthorityGeneration: 1, Owner: authority.OwnerRef{ID: "n1", Generation: 1}, State: record.StateActive}, StoreVersion: 1})
	h.MarkReady()
	return h, &work
}

func call(h *Object, op wire.OperationID) *pb.CallReply {
	w := &Work{Req: &pb.CallRequest{Object: h.Name(), Method: "inc", OperationId: op[:]}, Op: op, Done: make(chan *pb.CallReply, 1)}
	if r, ok := h.RunInline(w); ok {
		return r
	}
	if !h.Submit(w) {
		return nil
	}
	return <-w.Done
}

func TestObjectServesThroughItsNode(t *testing.T) {
	node := &fakeNode{lease: lease.Valid}
	h, work := newTestObject(t, node)
	op := wire.NewOperationID()
	if r := call(h, op); r.GetCode() != pb.Code_CODE_OK || string(r.GetPayload()) != "1" || r.GetFence().GetOwnerId() != "n1" {
		t.Fatalf("first call: %v", r)
	}
	if r := call(h, op); !r.GetReplayed() || string(r.GetPayload()) != "1" {
		t.Fatalf("a retry ran again: %v", r)
	}
	node.mu.Lock()
	node.lease = lease.Expired
	node.mu.Unlock()
	if r := call(h, wire.NewOperationID()); r.GetCode() != pb.Code_CODE_UNAVAILABLE {
		t.Fatalf("served without a lease: %v", r)
	}
	node.mu.Lock()
	node.lease = lease.Valid
	node.mu.Unlock()
	if r := call(h, wire.NewOperationID()); string(r.GetPayload()) != "2" {
		t.Fatalf("after the lease came back: %v", r)
	}
	h.Close()
	if r := call(h, wire.NewOperationID()); r != nil {
		t.Fatalf("a closed object took a call: %v", r)
	}
	work.Wait()
}
