//go:build failpoints

package faults

import (
	"context"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// StateStore wraps a node's state store with its faults: a write held or
// failed before it goes (state.before-write), a claim held
// (state.before-claim), and, in a store that has them (postgres), the
// planted bugs state-write-skips-fence and state-load-before-claim.
// A store read with the record (statestore.WithRecord, the etcd store)
// stays one, under the same claim hold.
func StateStore(s statestore.Store) statestore.Store {
	f := &stateFaults{Store: s}
	if w, ok := s.(statestore.WithRecord); ok {
		return &stateFaultsWithRecord{stateFaults: f, w: w}
	}
	return f
}

type stateFaults struct{ statestore.Store }

type stateFaultsWithRecord struct {
	*stateFaults
	w statestore.WithRecord
}

func (f *stateFaultsWithRecord) LoadFrom(c statestore.Claim, rd authority.StateRead) (authority.StateRead, error) {
	_ = failpoint.Hit(failpoint.StateBeforeClaim)
	return f.w.LoadFrom(c, rd)
}

// plantable is a store with the planted bugs' variants.
type plantable interface {
	PersistUnfenced(ctx context.Context, req authority.PersistRequest) (authority.PersistResult, error)
	LoadBeforeClaim(ctx context.Context, c statestore.Claim, between func()) (authority.StateRead, error)
}

func (f *stateFaults) Persist(ctx context.Context, req authority.PersistRequest) (authority.PersistResult, error) {
	if err := failpoint.Hit(failpoint.StateBeforeWrite); err != nil {
		return authority.PersistResult{}, err
	}
	if p, ok := f.Store.(plantable); ok && failpoint.Planted(failpoint.BugStateWriteSkipsFence) {
		return p.PersistUnfenced(ctx, req)
	}
	return f.Store.Persist(ctx, req)
}

func (f *stateFaults) Load(ctx context.Context, c statestore.Claim) (authority.StateRead, error) {
	hold := func() { _ = failpoint.Hit(failpoint.StateBeforeClaim) }
	if p, ok := f.Store.(plantable); ok && failpoint.Planted(failpoint.BugStateLoadBeforeClaim) {
		return p.LoadBeforeClaim(ctx, c, hold)
	}
	hold()
	return f.Store.Load(ctx, c)
}
