package authority

import (
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// etcd's NOSPACE. A member whose file reached its quota raises the NOSPACE
// alarm and refuses every write that puts a key (deletes, reads, leases'
// keep-alives and compactions still work) with "mvcc: database space
// exceeded" until an operator disarms it. The refusal is not a certain
// "not written": the write that crossed the quota was applied, and is
// answered NOSPACE all the same. So a write that meets it is resolved by
// reading back, as after any RPC error; found not written, it is neither
// a lost race nor an uncertainty — the relocation intent and the
// activation say ErrNoSpace, the other writes set WriteResult.NoSpace (a
// durable object's, PersistResult.NoSpace).

// IsNoSpace reports whether err is etcd's NOSPACE refusal (as the client
// or the gRPC status carries it) or ErrNoSpace.
func IsNoSpace(err error) bool {
	return err != nil && (errors.Is(err, ErrNoSpace) || errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace))
}
