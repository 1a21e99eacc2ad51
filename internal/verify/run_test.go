package verify

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// fakeCluster runs the built-in types in memory with the node's rules that
// the checkers rely on: a de-duplication table per object, fences on every
// reply, StateLost for callers that knew an older object generation. A
// relocation moves an object to another owner (authority generation + 1);
// crash re-creates every object of an owner with a larger object generation.
// bug plants a fault the suite must catch.
type fakeCluster struct {
	reg *actor.Registry
	bug string

	mu      sync.Mutex
	objects map[string]*fakeObject
	calls   int
}

type fakeObject struct {
	inst  actor.Object
	fence authority.Fence
	dedup map[wire.OperationID][]byte
}

var fakeNodes = []string{"n1", "n2", "n3"}

func newFakeCluster(t *testing.T, bug string) *fakeCluster {
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		t.Fatal(err)
	}
	return &fakeCluster{reg: reg, bug: bug, objects: map[string]*fakeObject{}}
}

func (c *fakeCluster) NewCaller(context.Context) (Caller, error) {
	return &fakeCaller{c: c, fences: map[string]authority.Fence{}}, nil
}

func (c *fakeCluster) Nodes() []string        { return fakeNodes }
func (c *fakeCluster) Etcd() *clientv3.Client { return nil }
func (c *fakeCluster) Keys() keyspace.Keys    { return keyspace.Default() }

func (c *fakeCluster) Relocate(_ context.Context, object, target string) (*pb.RelocationStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.objects[object]
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "node: object not hosted here")
	}
	if target == o.fence.Owner.ID {
		return nil, status.Error(codes.Unavailable, "node: no relocation target: "+target+" is this node")
	}
	if target == "" {
		for _, n := range fakeNodes {
			if n != o.fence.Owner.ID {
				target = n
				break
			}
		}
	}
	id := wire.NewRelocationID()
	src := o.fence.Owner
	o.fence.Owner = authority.OwnerRef{ID: target, Generation: 1}
	o.fence.AuthorityGeneration++
	return &pb.RelocationStatus{RelocationId: id[:], Object: object, Source: src.String(), Target: o.fence.Owner.String(), Outcome: "completed"}, nil
}

// crash loses the state of every object owned by node.
func (c *fakeCluster) crash(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, o := range c.objects {
		if o.fence.Owner.ID != node {
			continue
		}
		obj, _ := keyspace.ParseObject(name)
		typ, _ := c.reg.Lookup(obj.Type)
		o.inst = typ.New()
		o.dedup = map[wire.OperationID][]byte{}
		o.fence.Owner = authority.OwnerRef{ID: "n3", Generation: 1}
		o.fence.AuthorityGeneration++
		if c.bug != "silent-reset" {
			o.fence.ObjectGeneration++
		}
	}
}

type fakeCaller struct {
	c      *fakeCluster
	mu     sync.Mutex
	fences map[string]authority.Fence
}

func (f *fakeCaller) Fence(object string) (authority.Fence, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x, ok := f.fences[object]
	return x, ok
}

type fakeCtx struct{ obj keyspace.Object }

func (x fakeCtx) Object() keyspace.Object              { return x.obj }
func (x fakeCtx) Fence() actor.Fence                   { return actor.Fence{} }
func (x fakeCtx) Now() time.Time                       { return time.Now() }
func (x fakeCtx) SetTimer(actor.TimerSpec) error       { return nil }
func (x fakeCtx) CancelTimer(string) bool              { return false }
func (x fakeCtx) SetReminder(actor.ReminderSpec) error { return actor.ErrInvalidReminder }
func (x fakeCtx) CancelReminder(string) bool           { return false }
func (x fakeCtx) Push([]byte) error                    { return actor.ErrNoSession }
func (x fakeCtx) Publish([]byte) error                 { return nil }
func (x fakeCtx) Send(string, string, ...[]byte) error { return nil }
func (x fakeCtx) Ask(string, string, ...[]byte) error  { return nil }
func (x fakeCtx) Delete() error                        { return nil }
func (f *fakeCaller) known(object string) int64        { x, _ := f.Fence(object); return x.ObjectGeneration }
func (f *fakeCaller) accept(object string, x authority.Fence) {
	f.mu.Lock()
	f.fences[object] = x
	f.mu.Unlock()
}

func (f *fakeCaller) CallOp(ctx context.Context, op wire.OperationID, object, method string, args [][]byte) (*client.Reply, error) {
	c := f.c
	obj, err := keyspace.ParseObject(object)
	if err != nil {
		return nil, &wire.Error{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: err.Error()}
	}
	typ, err := c.reg.Lookup(obj.Type)
	if err != nil {
		return nil, &wire.Error{Code: pb.Code_CODE_UNKNOWN_TYPE, Message: err.Error()}
	}
	time.Sleep(200 * time.Microsecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	o, ok := c.objects[object]
	if !ok {
		o = &fakeObject{inst: typ.New(), fence: authority.Fence{Owner: authority.OwnerRef{ID: "n1", Generation: 1}, ObjectGeneration: 1, AuthorityGeneration: 1},
			dedup: map[wire.OperationID][]byte{}}
		c.objects[object] = o
	}
	if k := f.known(object); k != 0 && k < o.fence.ObjectGeneration {
		f.accept(object, o.fence)
		return nil, &wire.Error{Code: pb.Code_CODE_STATE_LOST, Message: "re-created"}
	}
	f.accept(object, o.fence)
	if out, dup := o.dedup[op]; dup {
		return &client.Reply{Payload: out, Fence: o.fence, Replayed: true}, nil
	}
	out, herr := o.inst.Handle(fakeCtx{obj}, method, args)
	if herr != nil {
		return nil, &wire.Error{Code: pb.Code_CODE_APPLICATION_ERROR, Message: herr.Error()}
	}
	if c.bug == "double-append" && method == "append" && c.calls%50 == 0 {
		_, _ = o.inst.Handle(fakeCtx{obj}, method, args)
	}
	o.dedup[op] = out
	if c.bug == "lose-ack" && method == "append" && c.calls%40 == 0 {
		// acknowledge without keeping it
		var r struct{ Items []string }
		rd, _ := o.inst.Handle(fakeCtx{obj}, "read", nil)
		_ = json.Unmarshal(rd, &r)
		typ2, _ := c.reg.Lookup(obj.Type)
		o.inst = typ2.New()
		for _, it := range r.Items[:len(r.Items)-1] {
			_, _ = o.inst.Handle(fakeCtx{obj}, "append", [][]byte{[]byte(it)})
		}
	}
	return &client.Reply{Payload: out, Fence: o.fence}, nil
}

func fakeRun(t *testing.T, bug string, crash bool) *Report {
	c := newFakeCluster(t, bug)
	cfg := Config{
		Cluster: c, Streams: 3, Duration: 1500 * time.Millisecond, OpTimeout: time.Second, Relocations: true,
		RelocationInterval: 20 * time.Millisecond, FinalTimeout: 5 * time.Second,
		Workloads: []Workload{
			&Bank{Prefix: "t", N: 2, Think: time.Millisecond}, &Register{Prefix: "t", N: 4, Think: time.Millisecond},
			&List{Prefix: "t", N: 3, Think: time.Millisecond}, &Counter{Prefix: "t", N: 3, Think: time.Millisecond},
		},
	}
	if crash {
		cfg.Faults = []Fault{{Kind: "crash-n2", At: 700 * time.Millisecond, Inject: func(context.Context) error {
			c.crash("n2")
			return nil
		}}}
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A correct (fake) cluster passes, with a crash whose losses are declared.
func TestRunFakeCluster(t *testing.T) {
	rep := fakeRun(t, "", true)
	t.Logf("\n%s", rep.Text())
	if rep.Failed() {
		t.Fatal("a correct cluster failed the run")
	}
	if rep.Relocations.Results["completed"] == 0 || rep.Faults["crash-n2"] != 1 || rep.Liveness.Readable != 12 {
		t.Fatalf("relocations %v faults %v liveness %+v", rep.Relocations.Results, rep.Faults, rep.Liveness)
	}
	if rep.Load.OK == 0 || len(rep.Load.Phases) != 3 {
		t.Fatalf("load %+v", rep.Load)
	}
	if _, err := rep.JSON(); err != nil {
		t.Fatal(err)
	}
}

// Planted bugs: each must fail the run with the right violation.
func TestRunFakeClusterPlantedBugs(t *testing.T) {
	for _, tc := range []struct {
		bug, want string
		crash     bool
	}{
		{"double-append", "duplicated", false},
		{"lose-ack", "lost", false},
		{"silent-reset", "", true},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			rep := fakeRun(t, tc.bug, tc.crash)
			if !rep.Failed() {
				t.Fatalf("bug %s not caught:\n%s", tc.bug, rep.Text())
			}
			if tc.want != "" {
				wantViolation(t, rep.Violations, tc.want)
			}
			text := rep.Text()
			t.Logf("%s", text[:min(len(text), 3000)])
			if !strings.Contains(text, "FAIL") {
				t.Fatal("text report does not say FAIL")
			}
		})
	}
}

func TestCheckFencesStaleReply(t *testing.T) {
	b := newHist()
	b.ok(1, "list", lst, "read", nil, lread{}, 0, 10, fence("n2", 1, 2))
	b.ok(2, "list", lst, "read", nil, lread{}, 20, 30, g11) // older, after
	b.ok(3, "list", lst, "read", nil, lread{}, 5, 25, g11)  // older, concurrent: fine
	c := CheckFences(b.h, nil)
	if c.StaleAccepted != 1 {
		t.Fatalf("stale accepted %d:\n%s", c.StaleAccepted, violations(c.Violations))
	}
	// Against the audit: the reply of n1 under a fence that etcd gave n2.
	audit := &AuditResult{Fences: map[FenceKey]Grant{
		{Object: lst, ObjectGeneration: 1, AuthorityGeneration: 1}: {Owner: authority.OwnerRef{ID: "n3", Generation: 1}},
		{Object: lst, ObjectGeneration: 1, AuthorityGeneration: 2}: {Owner: authority.OwnerRef{ID: "n2", Generation: 1}},
	}}
	c = CheckFences(b.h, audit)
	if c.TwoOwners != 1 {
		t.Fatalf("two owners %d:\n%s", c.TwoOwners, violations(c.Violations))
	}
}

func TestReportFigures(t *testing.T) {
	rep := &Report{Faults: map[string]int{}}
	b := listHistory([]string{"c1-1", "c2-1", "c1-2", "c2-2"}, g11)
	b.h.Fault("kill", ms(15), ms(35), nil)
	b.h.AddRelocation(Relocation{Object: lst, Call: ms(1), Return: ms(40), Result: "unknown", Err: "context deadline exceeded"})
	Assemble(rep, b.h, b.finalState(nil), []Workload{&List{N: 1}}, 0, ms(50), false)
	rep.Liveness = Liveness{Objects: 1, Readable: 1}
	if rep.Failed() {
		t.Fatalf("failed:\n%s", rep.Text())
	}
	if rep.Faults["kill"] != 1 || len(rep.Load.Phases) != 3 || rep.Load.Phases[0].OK != 2 || rep.Load.Phases[1].OK != 3 {
		t.Fatalf("figures %+v %+v", rep.Faults, rep.Load.Phases)
	}
	text := rep.Text()
	for _, want := range []string{"PASS", "before faults", "during faults", "after faults", "two-owner windows", "stale replies accepted", "declared lost"} {
		if !strings.Contains(text, want) {
			t.Errorf("report text has no %q:\n%s", want, text)
		}
	}
	js, err := rep.JSON()
	if err != nil || !strings.Contains(string(js), `"staleRepliesAccepted": 0`) {
		t.Fatalf("json %v:\n%s", err, js)
	}
	t.Logf("\n%s", text)
	rep.Liveness.Readable = 0
	if !rep.Failed() {
		t.Fatal("an unreadable object does not fail the run")
	}
	// A relocation that never answered fails the run when relocations must end.
	rep = &Report{}
	Assemble(rep, b.h, b.finalState(nil), []Workload{&List{N: 1}}, 0, ms(50), true)
	wantViolation(t, rep.Violations, "relocation-unended")
}

// A relocation is an operation: once its commit is in etcd and its request
// returned, a reply under the superseded fence is stale.
func TestCheckFencesAfterRelocation(t *testing.T) {
	b := newHist()
	b.ok(1, "list", lst, "read", nil, lread{}, 0, 10, g11)
	b.h.AddRelocation(Relocation{Object: lst, Call: ms(20), Return: ms(30), Result: "completed", RelocationID: "rel-1"})
	b.ok(2, "list", lst, "read", nil, lread{}, 40, 50, g11) // the old owner answered after the move
	audit := &AuditResult{Commits: map[string]Transition{
		"rel-1": {Object: lst, Kind: "commit", Record: record.Record{ObjectGeneration: 1, AuthorityGeneration: 2, Owner: authority.OwnerRef{ID: "n2", Generation: 1}}},
	}, Fences: map[FenceKey]Grant{
		{Object: lst, ObjectGeneration: 1, AuthorityGeneration: 1}: {Owner: authority.OwnerRef{ID: "n1", Generation: 1}},
		{Object: lst, ObjectGeneration: 1, AuthorityGeneration: 2}: {Owner: authority.OwnerRef{ID: "n2", Generation: 1}},
	}}
	c := CheckFences(b.h, audit)
	if c.StaleAccepted != 1 {
		t.Fatalf("stale accepted %d:\n%s", c.StaleAccepted, violations(c.Violations))
	}
	if c := CheckFences(b.h, nil); c.StaleAccepted != 0 {
		t.Fatalf("without the audit: stale accepted %d", c.StaleAccepted)
	}
}

func TestPayloadJSON(t *testing.T) {
	for _, p := range []Payload{Payload(`{"value":3}`), Payload("not json"), Payload(`"a string"`)} {
		b, err := json.Marshal(Op{Output: p, Outcome: OK})
		if err != nil {
			t.Fatal(err)
		}
		var o Op
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		if string(o.Output) != string(p) && !(string(p) == `"a string"` && string(o.Output) == "a string") {
			t.Errorf("%s → %s → %q", p, b, o.Output)
		}
	}
}
