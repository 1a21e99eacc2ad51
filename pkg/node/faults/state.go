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
func StateStore(s statestore.Store) statestore.Store { return &stateFaults{Store: s} }

type stateFaults struct{ statestore.Store }

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
