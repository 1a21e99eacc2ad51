package hosted

import (
	"reflect"
	"testing"

	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A timer fire that races the seal (the AfterFunc already running when
// capture stops the timer) is not kept as boundary or held work: those are
// sent to the target as requests, and a fire has none (CI once crashed in
// sendBoundary on one). The fire is refused, so the callback clears fireSet
// and reopen can re-arm; requests are still kept in order.
func TestTimerFireDuringSealIsNotKept(t *testing.T) {
	for _, mode := range []Mode{ModeBoundary, ModeHold} {
		h := &Object{Mode: mode}
		if h.Submit(&Work{Timer: true}) {
			t.Fatalf("mode %d: a timer fire was accepted", mode)
		}
		req := &Work{Req: &pb.CallRequest{}}
		if !h.Submit(req) {
			t.Fatalf("mode %d: a request was refused", mode)
		}
		kept := append(append([]*Work(nil), h.Mv.Boundary...), h.Mv.Held...)
		if len(kept) != 1 || kept[0] != req {
			t.Fatalf("mode %d: kept %v, want only the request", mode, kept)
		}
	}
	// A hidden target keeps a fire: it runs after admission, as a tick.
	h := &Object{Mode: ModeHidden}
	if !h.Submit(&Work{Timer: true}) || len(h.Mv.Waiting) != 1 {
		t.Fatal("hidden: a timer fire was not kept for admission")
	}
}

// TestSameRecordFields: sameRecord (served.go) compares every field of a
// record; a field added to record.Record must be added there too.
func TestSameRecordFields(t *testing.T) {
	if n := reflect.TypeFor[record.Record]().NumField(); n != 14 {
		t.Fatalf("record.Record has %d fields; sameRecord compares 14: compare the new one there, then update this count", n)
	}
	base := record.Record{Kind: "actor", Type: "counter", ObjectGeneration: 1, AuthorityGeneration: 2,
		Owner: record.OwnerRef{ID: "n1", Generation: 3}, Node: record.NodeRef{RoutingID: "r", Address: "a"},
		State: record.StateActive, LastRelocation: "x"}
	if !sameRecord(base, base) {
		t.Fatal("a record differs from itself")
	}
	for i, mut := range []func(*record.Record){
		func(r *record.Record) { r.Kind = "group" }, func(r *record.Record) { r.Type = "wallet" },
		func(r *record.Record) { r.ObjectGeneration++ }, func(r *record.Record) { r.AuthorityGeneration++ },
		func(r *record.Record) { r.Owner.Generation++ }, func(r *record.Record) { r.Node.Address = "b" },
		func(r *record.Record) { r.State = record.StateRelocating }, func(r *record.Record) { r.Intent = &record.Intent{} },
		func(r *record.Record) { r.Group = "g" }, func(r *record.Record) { r.Members = []string{} },
		func(r *record.Record) { r.Pinned = true }, func(r *record.Record) { r.LastRelocation = "y" },
		func(r *record.Record) { r.Deleted = 1 }, func(r *record.Record) { r.DeletedAtMs = 1 },
	} {
		r := base
		mut(&r)
		if sameRecord(base, r) {
			t.Errorf("change %d not seen", i)
		}
	}
}
