package routing

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func TestFencesRefuseOlder(t *testing.T) {
	f := NewFences(nil)
	g := func(obj, owner int64) *pb.Fence {
		return &pb.Fence{ObjectGeneration: obj, AuthorityGeneration: owner}
	}
	steps := []struct {
		fence *pb.Fence
		want  bool
	}{
		{g(1, 1), true},
		{g(1, 2), true},  // a later owner of the same life
		{g(1, 1), false}, // the superseded one
		{g(2, 1), true},  // a new life wins over any owner of the old
		{g(1, 9), false},
		{g(2, 1), true}, // the same fence again
	}
	for i, s := range steps {
		if got := f.Accept("actor/counter/a", s.fence); got != s.want {
			t.Fatalf("step %d: Accept(%v) = %v, want %v", i, s.fence, got, s.want)
		}
	}
	if n, ok := f.Newest("actor/counter/a"); !ok || n.ObjectGeneration != 2 || n.AuthorityGeneration != 1 {
		t.Fatalf("Newest = %+v %v, want 2/1", n, ok)
	}
	if !f.Accept("actor/counter/b", g(1, 1)) {
		t.Fatal("another object's first fence refused")
	}
	// A test build's planted bug answers for an older fence; the newest stays.
	bug := NewFences(func() bool { return true })
	bug.Accept("x", g(3, 3))
	if !bug.Accept("x", g(1, 1)) {
		t.Fatal("acceptOlder not asked")
	}
	if n, _ := bug.Newest("x"); n.ObjectGeneration != 3 {
		t.Fatalf("acceptOlder replaced the newest fence: %+v", n)
	}
}

// Retain forgets the fences of the objects it is told to (asleep), keeps
// the others, and a forgotten object starts afresh.
func TestFencesRetain(t *testing.T) {
	f := NewFences(nil)
	for _, name := range []string{"a", "b", "c"} {
		f.Accept(name, &pb.Fence{ObjectGeneration: 1, AuthorityGeneration: 5})
	}
	f.Retain(func(name string) bool { return name != "b" })
	if f.Len() != 2 {
		t.Fatalf("%d fences kept, want 2", f.Len())
	}
	if _, ok := f.Newest("b"); ok {
		t.Fatal("b's fence kept")
	}
	if !f.Accept("b", &pb.Fence{ObjectGeneration: 1, AuthorityGeneration: 6}) || f.Accept("a", &pb.Fence{ObjectGeneration: 1, AuthorityGeneration: 4}) {
		t.Fatal("Retain changed the judgment of the fences it kept or of the new one")
	}
}

func TestMovedExpiresInOrder(t *testing.T) {
	m := NewMoved(time.Second)
	t0 := time.Unix(1000, 0)
	m.Remember("a", "n2", t0)
	m.Remember("b", "n3", t0.Add(500*time.Millisecond))
	if addr, ok := m.To("a", t0.Add(time.Second)); !ok || addr != "n2" {
		t.Fatalf("a at its window's end: %q %v", addr, ok)
	}
	if _, ok := m.To("a", t0.Add(1001*time.Millisecond)); ok {
		t.Fatal("a after its window")
	}
	// a moves again: its older entry must not forget the newer one.
	m.Remember("a", "n4", t0.Add(900*time.Millisecond))
	m.Remember("c", "n5", t0.Add(1600*time.Millisecond)) // expires a's first and b
	if addr, ok := m.To("a", t0.Add(1700*time.Millisecond)); !ok || addr != "n4" {
		t.Fatalf("a moved again: %q %v", addr, ok)
	}
	if _, ok := m.To("b", t0.Add(1600*time.Millisecond)); ok {
		t.Fatal("b after its window")
	}
	if got := m.Len(); got != 2 {
		t.Fatalf("%d entries kept, want 2 (a, c)", got)
	}
}

func TestSplitKind(t *testing.T) {
	for in, want := range map[string]string{"actor/counter/a": "actor", "group/g": "group", "nokind": "nokind", "": ""} {
		if got := SplitKind(in); got != want {
			t.Errorf("SplitKind(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCallTimeoutKeepsANearerDeadline(t *testing.T) {
	near, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ctx, c2 := withCallTimeout(near, time.Hour)
	defer c2()
	if ctx != near {
		t.Fatal("a nearer deadline was wrapped")
	}
	ctx, c3 := withCallTimeout(context.Background(), time.Hour)
	defer c3()
	if _, ok := ctx.Deadline(); !ok {
		t.Fatal("no deadline set")
	}
}

// fakeHost serves every call here with a canned reply.
type fakeHost struct {
	here      bool
	reply     *pb.CallReply
	retry     bool
	served    int
	groups    int
	sessionOK bool
	refreshed int
}

func (h *fakeHost) Hosts(string) bool { return h.here }
func (h *fakeHost) ServeHere(context.Context, keyspace.Object, actor.Type, wire.OperationID, *pb.CallRequest) (*pb.CallReply, bool) {
	h.served++
	return h.reply, h.retry
}
func (h *fakeHost) CallGroup(context.Context, keyspace.Object, *pb.CallRequest) *pb.CallReply {
	h.groups++
	return &pb.CallReply{Code: pb.Code_CODE_OK}
}
func (h *fakeHost) Forward(context.Context, string, *pb.CallRequest) (*pb.CallReply, error) {
	panic("no forward in these tests")
}
func (h *fakeHost) SessionCaller(context.Context, *pb.SessionRef) bool { return h.sessionOK }
func (h *fakeHost) NodeCaller(context.Context) bool                    { return true }
func (h *fakeHost) WakesHere(string) bool                              { return false }
func (h *fakeHost) CallServed()                                        {}
func (h *fakeHost) Refresh(context.Context, keyspace.Object)           { h.refreshed++ }

func newTestRouter(t *testing.T, h *fakeHost) *Router {
	t.Helper()
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		t.Fatal(err)
	}
	return New(Config{CallTimeout: time.Second, DedupWindow: time.Hour, LeaseTTL: time.Second},
		Deps{Clock: clock.Real(), Registry: reg, Fences: NewFences(nil), Moved: NewMoved(time.Second), Host: h,
			Forwards: prometheus.NewCounter(prometheus.CounterOpts{Name: "f"}), StaleRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})})
}

func req(object, method string) *pb.CallRequest {
	op := wire.NewOperationID()
	return &pb.CallRequest{Version: wire.Version, Object: object, Method: method, OperationId: op[:]}
}

// What every owner would refuse is answered before anything is served.
func TestCallRefusesEarly(t *testing.T) {
	h := &fakeHost{here: true, reply: &pb.CallReply{Code: pb.Code_CODE_OK}}
	r := newTestRouter(t, h)
	old := req("actor/counter/a", "add")
	old.OperationId = nil
	session := req("actor/counter/a", "add")
	session.Session = &pb.SessionRef{GatewayId: "n9"}
	for name, c := range map[string]struct {
		req  *pb.CallRequest
		want pb.Code
	}{
		"unknown kind":    {req("thing/counter/a", "add"), pb.Code_CODE_UNKNOWN_KIND},
		"bad name":        {req("actor/counter", "add"), pb.Code_CODE_INVALID_ARGUMENT},
		"unknown method":  {req("actor/counter/a", "nope"), pb.Code_CODE_UNKNOWN_METHOD},
		"no operation id": {old, pb.Code_CODE_INVALID_OPERATION_ID},
		"foreign session": {session, pb.Code_CODE_PERMISSION_DENIED},
	} {
		if got := r.Call(context.Background(), c.req).GetCode(); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
	if h.served != 0 {
		t.Fatalf("%d refused calls were served", h.served)
	}
	if got := r.Call(context.Background(), req("group/g", "members")).GetCode(); got != pb.Code_CODE_OK || h.groups != 1 {
		t.Fatalf("a group call: %v, %d group calls", got, h.groups)
	}
}

// A reply whose fence is older than one seen is refused, and a direct call
// (a forward from another gateway) is answered once, never retried here.
func TestCallRefusesAnOlderFence(t *testing.T) {
	h := &fakeHost{here: true}
	r := newTestRouter(t, h)
	r.d.Fences.Accept("actor/counter/a", &pb.Fence{ObjectGeneration: 2, AuthorityGeneration: 1})
	h.reply = &pb.CallReply{Code: pb.Code_CODE_OK, Fence: &pb.Fence{ObjectGeneration: 1, AuthorityGeneration: 5, OwnerId: "n1"}}
	q := req("actor/counter/a", "add")
	q.Direct = true
	rep := r.Call(context.Background(), q)
	if rep.GetCode() != pb.Code_CODE_STALE_FENCE || h.served != 1 || h.refreshed != 1 {
		t.Fatalf("%v after %d serves, want stale_fence after 1", rep, h.served)
	}
	h.reply = &pb.CallReply{Code: pb.Code_CODE_OK, Fence: &pb.Fence{ObjectGeneration: 2, AuthorityGeneration: 2}}
	if rep := r.Call(context.Background(), req("actor/counter/a", "add")); rep.GetCode() != pb.Code_CODE_OK {
		t.Fatalf("the current owner's reply: %v", rep)
	}
}
