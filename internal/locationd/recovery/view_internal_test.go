package recovery

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// TestSleepingRecordsAreNoOrphans: a sleeping record names no owner; the
// view neither lists it as an orphan nor counts it as any node's load,
// and forgets the owner it had before its sleep.
func TestSleepingRecordsAreNoOrphans(t *testing.T) {
	v := newView(keyspace.Default())
	v.recs, v.byOwner, v.counts = map[string]entry{}, map[authority.OwnerRef]map[string]struct{}{}, map[string]int{}
	dead := authority.OwnerRef{ID: "n1", Generation: 5}
	v.putLocked("actor/c/a", entry{owner: dead, version: 10})
	v.putLocked("actor/c/b", entry{owner: dead, version: 11})
	v.putLocked("actor/c/b", entry{version: 12}) // b went to sleep
	if got := v.orphans(); len(got) != 1 || got[0] != "actor/c/a" {
		t.Fatalf("orphans %v, want only actor/c/a", got)
	}
	if v.orphaned("actor/c/b") {
		t.Fatal("a sleeping record is judged orphaned")
	}
	if n := v.counts["n1"]; n != 1 {
		t.Fatalf("n1 counted for %d records, want 1", n)
	}
	if n, asleep, _ := v.orphanCount(); n != 1 || asleep != 1 {
		t.Fatalf("orphanCount: %d orphans, %d asleep; want 1 and 1", n, asleep)
	}
	v.putLocked("actor/c/b", entry{owner: authority.OwnerRef{ID: "n2", Generation: 7}, version: 13}) // woken
	if _, asleep, _ := v.orphanCount(); asleep != 0 {
		t.Fatalf("%d asleep after the wake", asleep)
	}
	if _, ok := v.counts[""]; ok {
		t.Fatal("sleeping records counted as the load of owner \"\"")
	}
}
