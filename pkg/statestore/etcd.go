package statestore

import (
	"context"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Etcd is the default store: state/<object> and its replies in the same
// etcd as the records, each write one transaction that compares the
// authority record, the owner's key and the state key (authority
// PersistState). The record's transaction fences it, so a Load claims
// nothing: it reads.
type Etcd struct {
	s   *authority.Store
	max int
}

// NewEtcd is the etcd store over s, taking changes up to maxBytes.
func NewEtcd(s *authority.Store, maxBytes int) *Etcd { return &Etcd{s: s, max: maxBytes} }

// Name is "etcd".
func (e *Etcd) Name() string { return "etcd" }

// MaxBytes is the limit it was made with (--durable-max-bytes).
func (e *Etcd) MaxBytes() int { return e.max }

// Size is req.Size(): the value, its reply and schedule entries.
func (e *Etcd) Size(req authority.PersistRequest) int { return req.Size() }

// Load reads the persisted state (c.Fresh: its version only).
func (e *Etcd) Load(ctx context.Context, c Claim) (authority.StateRead, error) {
	if err := c.Validate(); err != nil {
		return authority.StateRead{}, err
	}
	if c.Fresh {
		rev, err := e.s.ReadStateVersion(ctx, c.Object)
		return authority.StateRead{StateVersion: rev}, err
	}
	rd, err := e.s.ReadState(ctx, c.Object)
	return Restorable(rd, c), err
}

// LoadFrom is Load's answer from rd, read in the transaction that made
// the claimer the owner (WithRecord).
func (e *Etcd) LoadFrom(c Claim, rd authority.StateRead) (authority.StateRead, error) {
	if err := c.Validate(); err != nil {
		return authority.StateRead{}, err
	}
	if c.Fresh {
		return authority.StateRead{StateVersion: rd.StateVersion, Revision: rd.Revision}, nil
	}
	return Restorable(rd, c), nil
}

// Persist is authority.Store.PersistState.
func (e *Etcd) Persist(ctx context.Context, req authority.PersistRequest) (authority.PersistResult, error) {
	return e.s.PersistState(ctx, req)
}

// Forget does nothing: the delete's transaction removed the state.
func (e *Etcd) Forget(context.Context, keyspace.Object, int64) error { return nil }

// Close does nothing: the etcd client is the node's.
func (e *Etcd) Close() error { return nil }

// Restorable is rd as the claimer c may restore it: a state written under
// a deleted generation (or a fresh object's predecessor) is not found,
// its version kept so that the first write replaces it.
func Restorable(rd authority.StateRead, c Claim) authority.StateRead {
	if rd.Found && (c.Fresh || rd.Value.ObjectGeneration <= c.Deleted) {
		return authority.StateRead{StateVersion: rd.StateVersion, Revision: rd.Revision}
	}
	return rd
}
