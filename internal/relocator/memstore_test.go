package relocator

import (
	"bytes"
	"context"
	"errors"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// memStore is an in-memory store with etcd's semantics for what a
// relocation does: every write is a compare-and-swap on the record's store
// version (intent, preserve) or exact bytes (commit), guarded by the
// writer's owner key, each at a new revision; reads see one revision. It
// also is the node's location cache (Watch): the driver tests exercise
// the driver, not the transactions (pkg/node's tests run those on a
// real etcd). Faults are set per call.
type memStore struct {
	mu      sync.Mutex
	rev     int64
	objs    map[string]record.Snapshot
	owners  map[string]int64 // owner id → generation (absent: dead)
	changed chan struct{}

	// commitReplyLost: the next commit applies but its reply is lost.
	commitReplyLost bool
	commits         int
	settleReads     int // ReadMany calls

	// A bulk run's listings (Lister), those it took back, and how many
	// intents asked for a relocations/<id> of their own.
	listings      map[string]authority.BulkListing
	unlisted      []string
	listedIntents int
	onCommit      func() // called under mu by every Commit (nil: none)

	bulk memBulks // memstore_bulk_test.go
}

func newMemStore() *memStore {
	return &memStore{objs: map[string]record.Snapshot{}, owners: map[string]int64{}, changed: make(chan struct{})}
}

func (m *memStore) put(obj keyspace.Object, r record.Record) record.Snapshot {
	m.rev++
	s := record.Snapshot{Object: obj, Record: r, StoreVersion: m.rev, Revision: m.rev}
	m.objs[obj.String()] = s
	close(m.changed)
	m.changed = make(chan struct{})
	return s
}

func (m *memStore) create(obj keyspace.Object, r record.Record) record.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.put(obj, r)
}

func (m *memStore) setOwner(o record.OwnerRef, alive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if alive {
		m.owners[o.ID] = o.Generation
	} else {
		delete(m.owners, o.ID)
	}
}

func (m *memStore) get(obj keyspace.Object) record.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.objs[obj.String()]
}

func (m *memStore) alive(o record.OwnerRef) bool { return m.owners[o.ID] == o.Generation }

func (m *memStore) write(seen record.Snapshot, owner record.OwnerRef, r record.Record) authority.WriteResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.objs[seen.Object.String()]
	if !ok || cur.StoreVersion != seen.StoreVersion || !m.alive(owner) {
		return authority.WriteResult{Found: ok, Snapshot: cur, OwnerAlive: m.alive(owner)}
	}
	return authority.WriteResult{Written: true, Found: true, OwnerAlive: true, Snapshot: m.put(seen.Object, r)}
}

func (m *memStore) ListBulk(_ context.Context, id string, l authority.BulkListing, _ clientv3.LeaseID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listings == nil {
		m.listings = map[string]authority.BulkListing{}
	}
	m.listings[id] = l
	return nil
}

func (m *memStore) UnlistBulk(_ context.Context, id string, _ authority.OwnerRef) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.listings, id)
	m.unlisted = append(m.unlisted, id)
	return nil
}

func (m *memStore) Intend(_ context.Context, req authority.IntentRequest) (authority.WriteResult, error) {
	if !req.Unlisted {
		m.mu.Lock()
		m.listedIntents++
		m.mu.Unlock()
	}
	r := req.Seen.Record
	in := req.Intent
	r.State, r.Intent = record.StateRelocating, &in
	return m.write(req.Seen, req.Source, r), nil
}

func (m *memStore) Preserve(_ context.Context, req authority.PreserveRequest) (authority.WriteResult, error) {
	r := req.Seen.Record
	r.State, r.Intent, r.LastRelocation = record.StateActive, nil, req.RelocationID
	return m.write(req.Seen, req.Source, r), nil
}

var errReplyLost = errors.New("memstore: reply lost")

func (m *memStore) Commit(_ context.Context, req authority.CommitRequest) (authority.CommitResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.commits++
	if m.onCommit != nil {
		m.onCommit()
	}
	res := authority.CommitResult{Records: map[string]record.Snapshot{}}
	for _, p := range req.Participants {
		cur, ok := m.objs[p.Expected.Object.String()]
		if !ok || !bytes.Equal(cur.Record.Encode(), p.Expected.Record.Encode()) || cur.StoreVersion != p.Expected.StoreVersion || !m.alive(req.Target) || !m.bulk.fenced(req) {
			for _, q := range req.Participants {
				if c, ok := m.objs[q.Expected.Object.String()]; ok {
					res.Records[q.Expected.Object.String()] = c
				}
			}
			return res, nil
		}
	}
	for _, p := range req.Participants {
		res.Records[p.Expected.Object.String()] = m.put(p.Expected.Object, authority.Planned(p, req.Target, req.TargetNode, req.RelocationID))
	}
	res.Committed = true
	if m.commitReplyLost {
		m.commitReplyLost = false
		return authority.CommitResult{}, errReplyLost
	}
	return res, nil
}

func (m *memStore) ResolveCommit(_ context.Context, req authority.CommitRequest) (authority.CommitResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res := authority.CommitResult{Records: map[string]record.Snapshot{}, Resolved: true}
	committed := true
	for _, p := range req.Participants {
		cur, ok := m.objs[p.Expected.Object.String()]
		if ok {
			res.Records[p.Expected.Object.String()] = cur
		}
		planned := authority.Planned(p, req.Target, req.TargetNode, req.RelocationID)
		committed = committed && ok && cur.StoreVersion > p.Expected.StoreVersion && bytes.Equal(cur.Record.Encode(), planned.Encode())
	}
	res.Committed = committed
	return res, nil
}

func (m *memStore) Read(_ context.Context, obj keyspace.Object) (authority.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.objs[obj.String()]
	if !ok {
		return s, authority.ErrNotFound
	}
	return s, nil
}

func (m *memStore) ReadMany(_ context.Context, objs []keyspace.Object, owners []string) (authority.View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settleReads++
	v := authority.View{Revision: m.rev, Objects: map[string]record.Snapshot{}, Owners: map[string]record.OwnerKey{}}
	for _, o := range objs {
		if s, ok := m.objs[o.String()]; ok {
			v.Objects[o.String()] = s
		}
	}
	for _, id := range owners {
		v.Owners[id] = record.OwnerKey{Generation: m.owners[id]}
	}
	return v, nil
}

// Changed and Lookup: the store is its own location cache.
func (m *memStore) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *memStore) Lookup(obj keyspace.Object) (record.Location, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.objs[obj.String()]
	return record.LocationOf(s), ok
}

func (m *memStore) LookupName(name string) (record.Location, bool) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return record.Location{}, false
	}
	return m.Lookup(obj)
}
