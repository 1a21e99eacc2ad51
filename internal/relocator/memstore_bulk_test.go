package relocator

import (
	"context"
	"fmt"

	"github.com/meshloc/meshloc/pkg/authority"
)

// memBulks is the memStore's relocations/<bulk id> under the one-write
// rule: each bulk intent and its revision (its fence's).
type memBulks struct {
	keys     map[string]memBulk
	maxUnits int // MaxBulkUnits (0: 126)
	writes   int // WriteBulkIntent calls
	reads    int // ReadBulkIntent calls
	deletes  int // keys deleted
}

type memBulk struct {
	intent authority.BulkIntent
	rev    int64
}

// fenced: a bulk unit's commit finds its bulk's key at the revision read.
func (b *memBulks) fenced(req authority.CommitRequest) bool {
	return req.Bulk == nil || b.keys[req.Bulk.ID].rev == req.Bulk.Revision && req.Bulk.Revision != 0
}

func (m *memStore) MaxBulkUnits() int {
	if m.bulk.maxUnits > 0 {
		return m.bulk.maxUnits
	}
	return 126
}

func (m *memStore) WriteBulkIntent(_ context.Context, id string, b authority.BulkIntent) (authority.BulkIntentResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bulk.writes++
	if len(b.Units) > m.MaxBulkUnits() {
		return authority.BulkIntentResult{}, fmt.Errorf("%d units in one bulk intent, at most %d", len(b.Units), m.MaxBulkUnits())
	}
	res := authority.BulkIntentResult{OwnerAlive: m.alive(b.Source), Current: map[string]authority.Snapshot{}}
	_, res.Exists = m.bulk.keys[id]
	for _, u := range b.Units {
		cur, ok := m.objs[u.Object]
		if ok {
			res.Current[u.Object] = cur
		}
		if !ok || cur.StoreVersion != u.StoreVersion {
			res.Stale = append(res.Stale, u.Object)
		}
	}
	if len(res.Stale) > 0 || !res.OwnerAlive || res.Exists {
		return res, nil
	}
	if m.bulk.keys == nil {
		m.bulk.keys = map[string]memBulk{}
	}
	m.rev++
	m.bulk.keys[id] = memBulk{intent: b, rev: m.rev}
	return authority.BulkIntentResult{Written: true, Revision: m.rev, OwnerAlive: true}, nil
}

func (m *memStore) ReadBulkIntent(_ context.Context, id string) (authority.BulkIntent, int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bulk.reads++
	k, ok := m.bulk.keys[id]
	return k.intent, k.rev, ok, nil
}

func (m *memStore) DeleteBulkIntent(_ context.Context, id string, rev int64, _ authority.OwnerRef) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.bulk.keys[id]; !ok || k.rev != rev {
		return false, nil
	}
	delete(m.bulk.keys, id)
	m.bulk.deletes++
	return true, nil
}
