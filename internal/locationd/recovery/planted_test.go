//go:build failpoints

package recovery_test

// The planted bug recovery-batch-shared-compare (internal/failpoint): its
// trigger is an orphan whose record changes between the controller's read
// and its batch (recovered first by someone else, as a call would). The
// correct controller leaves it alone; the planted one recovers it over the
// change, and checkRecoveredOnce — the check of TestRecoverThousandsInBatches
// — reports it.
//
// Run with: go test -tags failpoints -run Planted ./internal/locationd/recovery/

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/authority"
)

func TestPlantedRecoveryBatchSharedCompare(t *testing.T) {
	for _, planted := range []bool{false, true} {
		name := "correct"
		if planted {
			name = "planted"
		}
		t.Run(name, func(t *testing.T) {
			if planted {
				t.Cleanup(failpoint.Plant(failpoint.BugRecoveryBatchSharedCompare))
			}
			bad := recoverWithOneRaced(t)
			switch {
			case !planted && len(bad) > 0:
				t.Fatalf("correct controller: %d violations: %v", len(bad), bad)
			case planted && len(bad) == 0:
				t.Fatal("planted bug not caught: every orphan recovered once, the raced one left alone")
			case planted:
				t.Logf("caught: %v", bad)
			}
		})
	}
}

// recoverWithOneRaced recovers 300 orphans of a ghost owner onto two live
// owners while one orphan of the first step is recovered by someone else
// between the controller's read and its write, and returns what
// checkRecoveredOnce finds.
func recoverWithOneRaced(t *testing.T) []string {
	const objects = 300
	oc := newOrphanCluster(t, objects)
	ctx := context.Background()
	head, err := oc.cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	a := startAudit(t, oc.cli, head.Header.Revision+1)
	live2 := ref(oc.live[1])
	raced := map[string]authority.OwnerRef{}
	var once sync.Once
	rec := start(t, oc.cli, "r", func(c *recovery.Config) { c.Recover = true })
	recovery.SetBeforeWrite(rec.c, func(reqs []authority.RecoverRequest) {
		once.Do(func() {
			if len(reqs) < 3 {
				t.Errorf("the first step has %d recoveries: not a batch", len(reqs))
				return
			}
			mid := reqs[len(reqs)/2].Seen
			w, err := oc.st.Recover(ctx, authority.RecoverRequest{Seen: mid, NewOwner: live2,
				Node: authority.NodeRef{RoutingID: strings.Repeat("cd", 16), Address: "127.0.0.1:2"}})
			if err != nil || !w.Written {
				t.Errorf("competing recovery of %s: %+v %v", mid.Object, w, err)
				return
			}
			raced[mid.Object.String()] = live2
		})
	})
	leads(t, oc.cli, rec, 30*time.Second)
	if err := oc.ghost.Close(ctx); err != nil { // revokes its lease
		t.Fatal(err)
	}
	waitFor(t, "every orphan recovered", 2*time.Minute, func() error {
		if s := rec.c.Status(); s.Orphans != 0 || s.Recovered < objects-1 {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	a.caughtUp(t, oc.cli)
	live := map[authority.OwnerRef]bool{ref(oc.live[0]): true, live2: true}
	return checkRecoveredOnce(t, oc.st, a, "ghost", oc.before, live, raced)
}
