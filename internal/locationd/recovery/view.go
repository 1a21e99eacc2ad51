package recovery

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdscan"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/placement"
)

// entry is what the view keeps of one record.
type entry struct {
	owner   authority.OwnerRef
	version int64  // ModRevision
	group   string // a member's group
	members []string
}

// view is the leader's picture of records and owner keys, complete up to
// rev: owner keys and records are applied from one watch stream, so "is the
// owner alive" is judged at the revision the records are at.
type view struct {
	keys keyspace.Keys

	mu      sync.Mutex
	rev     int64
	recs    map[string]entry
	owners  map[string]lease.Owner
	byOwner map[authority.OwnerRef]map[string]struct{}
	counts  map[string]int // records per owner id (any generation): placement's load
	asleep  int            // records of sleeping objects (no owner)
}

func newView(keys keyspace.Keys) *view { return &view{keys: keys} }

// load lists owner keys and records at one revision (records paged at that
// revision) and replaces the view with them.
func (v *view) load(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, v.keys.OwnersPrefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("recovery: list owners: %w", err)
	}
	rev := resp.Header.Revision
	owners := map[string]lease.Owner{}
	for _, kv := range resp.Kvs {
		if id, o, ok := v.owner(kv); ok {
			owners[id] = o
		}
	}
	recs := map[string]entry{}
	prefix := v.keys.AuthorityPrefix()
	_, err = etcdscan.Range(ctx, cli, prefix, clientv3.GetPrefixRangeEnd(prefix), rev, func(kvs []*mvccpb.KeyValue) error {
		for _, kv := range kvs {
			if name, e, ok := v.record(kv); ok {
				recs[name] = e
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("recovery: list records at revision %d: %w", rev, err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.rev, v.recs, v.owners = rev, recs, owners
	v.byOwner, v.counts, v.asleep = map[authority.OwnerRef]map[string]struct{}{}, map[string]int{}, 0
	for name, e := range recs {
		v.index(name, e)
	}
	return rev, nil
}

func (v *view) owner(kv *mvccpb.KeyValue) (string, lease.Owner, bool) {
	id, err := v.keys.ParseOwner(string(kv.Key))
	if err != nil {
		return "", lease.Owner{}, false
	}
	d, err := lease.DecodeDescriptor(kv.Value)
	if err != nil {
		d = lease.Descriptor{OwnerID: id}
	}
	return id, lease.Owner{Descriptor: d, Generation: kv.CreateRevision, ModRevision: kv.ModRevision, LeaseID: kv.Lease}, true
}

func (v *view) record(kv *mvccpb.KeyValue) (string, entry, bool) {
	obj, err := v.keys.ParseAuthority(string(kv.Key))
	if err != nil {
		return "", entry{}, false
	}
	r, err := authority.DecodeRecord(kv.Value)
	if err != nil {
		return "", entry{}, false // a corrupt record: GET /v1/objects/{object} reports it
	}
	return obj.String(), entry{owner: r.Owner, version: kv.ModRevision, group: r.Group, members: r.Members}, true
}

// index and unindex keep byOwner and counts; a sleeping object (no
// owner) is in neither: it is no orphan, and loads no node.
func (v *view) index(name string, e entry) {
	if e.owner.IsZero() {
		v.asleep++
		return
	}
	set := v.byOwner[e.owner]
	if set == nil {
		set = map[string]struct{}{}
		v.byOwner[e.owner] = set
	}
	set[name] = struct{}{}
	v.counts[e.owner.ID]++
}

func (v *view) unindex(name string, e entry) {
	if e.owner.IsZero() {
		v.asleep--
		return
	}
	if set := v.byOwner[e.owner]; set != nil {
		delete(set, name)
		if len(set) == 0 {
			delete(v.byOwner, e.owner)
		}
	}
	if v.counts[e.owner.ID]--; v.counts[e.owner.ID] <= 0 {
		delete(v.counts, e.owner.ID)
	}
}

// putLocked applies a record of version; older information is ignored.
func (v *view) putLocked(name string, e entry) {
	if old, ok := v.recs[name]; ok {
		if old.version >= e.version {
			return
		}
		v.unindex(name, old)
	}
	v.recs[name] = e
	v.index(name, e)
}

// apply applies one watch batch, complete up to revision upTo.
func (v *view) apply(evs []*clientv3.Event, upTo int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		switch {
		case strings.HasPrefix(key, v.keys.OwnersPrefix()):
			id, err := v.keys.ParseOwner(key)
			if err != nil {
				continue
			}
			if ev.Type == clientv3.EventTypeDelete {
				delete(v.owners, id)
			} else if _, o, ok := v.owner(ev.Kv); ok {
				v.owners[id] = o
			}
		case strings.HasPrefix(key, v.keys.AuthorityPrefix()):
			if ev.Type == clientv3.EventTypeDelete {
				obj, err := v.keys.ParseAuthority(key)
				if err != nil {
					continue
				}
				if old, ok := v.recs[obj.String()]; ok && old.version < ev.Kv.ModRevision {
					v.unindex(obj.String(), old)
					delete(v.recs, obj.String())
				}
			} else if name, e, ok := v.record(ev.Kv); ok {
				v.putLocked(name, e)
			}
		}
	}
	v.rev = max(v.rev, upTo)
}

// observe applies a record this controller just wrote.
func (v *view) observe(s authority.Snapshot) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.recs == nil {
		return
	}
	v.putLocked(s.Object.String(), entry{owner: s.Record.Owner, version: s.StoreVersion, group: s.Record.Group, members: s.Record.Members})
}

func (v *view) aliveLocked(o authority.OwnerRef) bool {
	ow, ok := v.owners[o.ID]
	return ok && ow.Generation == o.Generation
}

// orphanCount is the number of orphaned records, of sleeping ones, and
// the revision they hold at.
func (v *view) orphanCount() (int, int, int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for ref, set := range v.byOwner {
		if !v.aliveLocked(ref) {
			n += len(set)
		}
	}
	return n, v.asleep, v.rev
}

// orphans are the orphaned records' names, sorted.
func (v *view) orphans() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for ref, set := range v.byOwner {
		if v.aliveLocked(ref) {
			continue
		}
		for name := range set {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// orphaned reports whether name is orphaned in the view now.
func (v *view) orphaned(name string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.recs[name]
	return ok && !e.owner.IsZero() && !v.aliveLocked(e.owner)
}

// groupOf is what the view knows of a member's group: whether its record
// exists, and its owner when that owner is alive.
func (v *view) groupOf(group string) (owner authority.OwnerRef, exists, alive bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.recs[group]
	if !ok {
		return authority.OwnerRef{}, false, false
	}
	return e.owner, true, v.aliveLocked(e.owner)
}

// candidates are the live owners in id order, as placement sees them
// (an owner without an address cannot be reached: not serving), and the
// records each holds now (placement's load).
func (v *view) candidates() ([]lease.Owner, []placement.Candidate, map[string]int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	owners := make([]lease.Owner, 0, len(v.owners))
	for _, o := range v.owners {
		owners = append(owners, o)
	}
	slices.SortFunc(owners, func(a, b lease.Owner) int { return strings.Compare(a.Descriptor.OwnerID, b.Descriptor.OwnerID) })
	cands := make([]placement.Candidate, len(owners))
	counts := make(map[string]int, len(owners))
	for i, o := range owners {
		cands[i] = o.Candidate()
		counts[o.Descriptor.OwnerID] = v.counts[o.Descriptor.OwnerID]
	}
	return owners, cands, counts
}

// need is what the view knows an orphan asks of its new owner (the types
// of an actor, or of a group's members); false when it holds no record of
// name.
func (v *view) need(name string) (placement.Need, bool) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return placement.Need{}, false
	}
	v.mu.Lock()
	e, ok := v.recs[name]
	v.mu.Unlock()
	if !ok {
		return placement.Need{}, false
	}
	return placement.Need{Types: typesOf(obj, e.members)}, true
}

// alive reports whether o is a live owner in the view now.
func (v *view) alive(o authority.OwnerRef) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.aliveLocked(o)
}

// dead reports whether o is gone for good as the view knows it: the view
// is complete up to version or later (so it has seen o's key created, if
// a record of that version names it) and o has no live key. An owner pair
// that is gone never lives again (a new key has a new CreateRevision).
func (v *view) dead(o authority.OwnerRef, version int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return version <= v.rev && !v.aliveLocked(o)
}
