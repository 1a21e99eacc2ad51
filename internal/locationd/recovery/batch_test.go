package recovery_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// audit follows every write under the prefix from a revision on: each
// record's puts (revision, owner, object generation) and the revision at
// which each owner key was deleted.
type audit struct {
	mu      sync.Mutex
	rev     int64 // the last event's revision
	puts    map[string][]auditPut
	deleted map[string]int64 // owner id → revision of its key's deletion
	stop    func()
}

type auditPut struct {
	rev int64
	rec authority.Record
}

func startAudit(t *testing.T, cli *clientv3.Client, from int64) *audit {
	t.Helper()
	a := &audit{puts: map[string][]auditPut{}, deleted: map[string]int64{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	wch := cli.Watch(ctx, keys.AuthorityPrefix(), clientv3.WithRange(clientv3.GetPrefixRangeEnd(keys.OwnersPrefix())), clientv3.WithRev(from))
	go func() {
		defer close(done)
		for resp := range wch {
			a.mu.Lock()
			for _, ev := range resp.Events {
				a.rev = max(a.rev, ev.Kv.ModRevision)
				k := string(ev.Kv.Key)
				if id, err := keys.ParseOwner(k); err == nil && ev.Type == clientv3.EventTypeDelete {
					a.deleted[id] = ev.Kv.ModRevision
				} else if obj, err := keys.ParseAuthority(k); err == nil && ev.Type == clientv3.EventTypePut {
					if r, err := authority.DecodeRecord(ev.Kv.Value); err == nil {
						a.puts[obj.String()] = append(a.puts[obj.String()], auditPut{rev: ev.Kv.ModRevision, rec: r})
					}
				}
			}
			a.mu.Unlock()
		}
	}()
	a.stop = func() { cancel(); <-done }
	t.Cleanup(a.stop)
	return a
}

// caughtUp waits until the audit saw every write so far: a marker key
// inside the followed range (among the controllers' keys, which nothing
// here reads) is written, and the audit must see it.
func (a *audit) caughtUp(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	resp, err := cli.Put(context.Background(), keys.Controller("audit-marker"), "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the audit caught up", 60*time.Second, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.rev < resp.Header.Revision {
			return fmt.Errorf("audit at %d, want %d", a.rev, resp.Header.Revision)
		}
		return nil
	})
}

// nodeRef is owner id's node (routing id, address) as its owner key says.
func nodeRef(t *testing.T, cli *clientv3.Client, id string) authority.NodeRef {
	t.Helper()
	owners, _, err := lease.ListOwners(context.Background(), cli, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if o.Descriptor.OwnerID == id {
			return authority.NodeRef{RoutingID: o.Descriptor.RoutingID, Address: o.Descriptor.Address}
		}
	}
	t.Fatalf("no owner %s", id)
	return authority.NodeRef{}
}

// plainCounter is the value of a counter without labels.
func plainCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// checkRecoveredOnce checks the orphans of dead (their records as in
// before) after recovery, against the audit: each is recovered exactly once
// — one write after its owner's key was deleted, naming a live owner
// with object generation +1 — and is owned so now; none is lost; nothing
// was written for it while dead lived. raced names orphans a competing
// recovery took first: their one write is that one (by owner raced[name]).
// It returns every violation.
func checkRecoveredOnce(t *testing.T, st *authority.Store, a *audit, dead string, before map[string]authority.Snapshot, live map[authority.OwnerRef]bool, raced map[string]authority.OwnerRef) []string {
	t.Helper()
	ctx := context.Background()
	a.mu.Lock()
	defer a.mu.Unlock()
	died, ok := a.deleted[dead]
	if !ok {
		return []string{"the audit never saw the dead owner's key deleted"}
	}
	var bad []string
	names := make([]string, 0, len(before))
	for name := range before {
		names = append(names, name)
	}
	slices.Sort(names)
	objs := make([]keyspace.Object, 0, len(names))
	for _, name := range names {
		objs = append(objs, before[name].Object)
	}
	now := map[string]authority.Snapshot{}
	for start := 0; start < len(objs); start += 100 {
		v, err := st.ReadMany(ctx, objs[start:min(start+100, len(objs))], nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, s := range v.Objects {
			now[k] = s
		}
	}
	for _, name := range names {
		was := before[name]
		var writes []auditPut
		for _, p := range a.puts[name] {
			if p.rev > was.StoreVersion {
				writes = append(writes, p)
			}
		}
		cur, found := now[name]
		switch {
		case !found:
			bad = append(bad, fmt.Sprintf("%s: lost (no record)", name))
		case len(writes) != 1:
			bad = append(bad, fmt.Sprintf("%s: %d writes after the crash, want exactly 1 (%+v)", name, len(writes), writes))
		case writes[0].rev <= died:
			bad = append(bad, fmt.Sprintf("%s: recovered at revision %d while its owner lived (its key deleted at %d)", name, writes[0].rev, died))
		case cur.Record.ObjectGeneration != was.Record.ObjectGeneration+1:
			bad = append(bad, fmt.Sprintf("%s: object generation %d, want %d (one recovery)", name, cur.Record.ObjectGeneration, was.Record.ObjectGeneration+1))
		case !live[cur.Record.Owner]:
			bad = append(bad, fmt.Sprintf("%s: owned by %s, not a live owner", name, cur.Record.Owner))
		}
		if r, ok := raced[name]; ok && found && cur.Record.Owner != r {
			bad = append(bad, fmt.Sprintf("%s: recovered first by %s, but now owned by %s: the controller wrote over it", name, r, cur.Record.Owner))
		}
	}
	return bad
}

// A node holding 10,000 counters dies without draining (its lease is
// revoked: it writes nothing more, and its objects stay named as its). The
// recovery controller recovers every one exactly once (one write, after the
// owner's key was deleted, object generation +1, on a live node), in
// batches that share etcd requests. Meanwhile, between the controller's
// read of one step and its write, one orphan of that step is recovered by
// someone else (as a call would), and a live owner the step placed orphans
// on dies: neither kind is applied, their batch-mates are, and the next
// pass puts the second kind on the remaining live nodes.
func TestRecoverThousandsInBatches(t *testing.T) {
	const objects = 10_000
	srv := etcdtest.Single(t)
	ep := srv.Endpoint()
	cli := etcdtest.Client(t, ep)
	ctx := context.Background()
	st := authority.New(cli, keys)
	n1 := startNode(t, ep, "n1", 1)
	cl, err := client.New(ctx, client.Config{Etcd: cli, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 64)
	for range 64 { // created while n1 is the only node: every one is n1's
		wg.Go(func() {
			for i := range next {
				if _, err := cl.Call(ctx, fmt.Sprintf("actor/counter/c%05d", i), "add", "1"); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range objects {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	before := map[string]authority.Snapshot{}
	snaps, _, err := st.List(ctx, authority.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if s.Record.Owner == n1.Self() {
			before[s.Object.String()] = s
		}
	}
	if len(before) != objects {
		t.Fatalf("%d of %d objects on n1", len(before), objects)
	}
	n2, n3 := startNode(t, ep, "n2", 1), startNode(t, ep, "n3", 1)
	doomed := startOwner(t, cli, "n4", "counter") // a live owner that dies mid-step
	n3Node := nodeRef(t, cli, "n3")
	head, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	a := startAudit(t, cli, head.Header.Revision+1)

	var once sync.Once
	raced := map[string]authority.OwnerRef{}
	var mates []string // the other orphans of the step that raced
	var doomedPlanned int
	rec := start(t, cli, "recoverer", func(c *recovery.Config) { c.Recover, c.Retry = true, 200*time.Millisecond })
	recovery.SetBeforeWrite(rec.c, func(reqs []authority.RecoverRequest) {
		once.Do(func() {
			if len(reqs) < 3 {
				t.Errorf("the first step has %d recoveries: not a batch", len(reqs))
				return
			}
			mid := reqs[len(reqs)/2]
			w, err := st.Recover(ctx, authority.RecoverRequest{Seen: mid.Seen, NewOwner: n3.Self(), Node: n3Node})
			if err != nil || !w.Written {
				t.Errorf("competing recovery of %s: %+v %v", mid.Seen.Object, w, err)
				return
			}
			raced[mid.Seen.Object.String()] = n3.Self()
			for _, r := range reqs {
				switch {
				case r.NewOwner.ID == "n4":
					doomedPlanned++
				case r.Seen.Object != mid.Seen.Object:
					mates = append(mates, r.Seen.Object.String())
				}
			}
			if err := doomed.Close(ctx); err != nil { // revokes its lease
				t.Error(err)
			}
		})
	})
	leads(t, cli, rec, 30*time.Second)

	// n1 dies without draining: its lease ends, its records stay.
	owners, _, err := lease.ListOwners(ctx, cli, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if o.Descriptor.OwnerID == "n1" {
			if _, err := cli.Revoke(ctx, clientv3.LeaseID(o.LeaseID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "every orphan recovered", 5*time.Minute, func() error {
		if s := rec.c.Status(); s.Orphans != 0 || s.Recovered != objects-1 {
			return fmt.Errorf("status %+v, want 0 orphans and %d recovered", s, objects-1)
		}
		return nil
	})
	if doomedPlanned == 0 {
		t.Errorf("the first step placed nothing on n4: its death tested nothing")
	}
	a.caughtUp(t, cli)
	live := map[authority.OwnerRef]bool{n2.Self(): true, n3.Self(): true}
	if bad := checkRecoveredOnce(t, st, a, "n1", before, live, raced); len(bad) > 0 {
		t.Fatalf("%d violations, first: %v", len(bad), bad[:min(5, len(bad))])
	}
	// The raced orphan's batch-mates were applied (checked above: one
	// write each), in requests they shared: a request is one revision.
	revs := map[int64]bool{}
	a.mu.Lock()
	for _, name := range mates {
		if ps := a.puts[name]; len(ps) > 0 {
			revs[ps[len(ps)-1].rev] = true
		}
	}
	a.mu.Unlock()
	if len(mates) < 100 || len(revs) > len(mates)/50 {
		t.Fatalf("the raced orphan's %d batch-mates were written at %d revisions: not in shared requests", len(mates), len(revs))
	}
	s := rec.c.Status()
	if s.Requests == 0 || s.Recovered/s.Requests < 20 {
		t.Fatalf("%d recoveries took %d etcd write requests: not batched", s.Recovered, s.Requests)
	}
	if got := plainCounter(t, rec.reg, "meshloc_locationd_recovery_requests_total"); got != float64(s.Requests) {
		t.Fatalf("meshloc_locationd_recovery_requests_total %v, status %d", got, s.Requests)
	}
	if got := counter(t, rec.reg, "meshloc_locationd_recoveries_total", "outcome", recovery.OutcomeRaced); got < float64(1+doomedPlanned) {
		t.Fatalf("raced %v, want at least %d (the orphan recovered first, those placed on n4)", got, 1+doomedPlanned)
	}
	t.Logf("%d orphans recovered in %d etcd write requests; %d placed on n4 when it died", s.Recovered, s.Requests, doomedPlanned)

	// The node side: the first call of a recovered counter is state_lost
	// (not executed), the next runs on fresh state.
	for _, name := range mates[:3] {
		if _, err := cl.Call(ctx, name, "add", "1"); !isCode(err, pb.Code_CODE_STATE_LOST) {
			t.Fatalf("first call of recovered %s: %v, want state_lost", name, err)
		}
		if r, err := cl.Call(ctx, name, "get"); err != nil || !strings.Contains(string(r.Payload), `"value":0`) {
			t.Fatalf("%s after state_lost: %+v %v", name, r, err)
		}
	}
}
