//go:build failpoints

package authority

import "context"

// CommitWithoutCompare is Commit without its record compares (the owner
// key's stays; a bulk unit's compare of its bulk's fence goes too): the planted
// bugs commit-without-compare and bulk-commit-ignores-compare of internal/failpoint,
// which a test build's node puts in its Store seam. It exists in test builds
// only.
func (s *Store) CommitWithoutCompare(ctx context.Context, req CommitRequest) (CommitResult, error) {
	return s.commit(ctx, req, false)
}

// RecoverManySharedCompare is RecoverMany in which every actor's
// transaction after the first of its request (runs of as many as one
// request carries) leaves out the compare of its own record, as if the
// first one's guarded them all (its catalog, owner and guard compares
// stay): the planted bug
// recovery-batch-shared-compare of internal/failpoint, which a test
// build's recovery controller puts in its seam. It exists in test builds
// only.
func (s *Store) RecoverManySharedCompare(ctx context.Context, reqs []RecoverRequest) ([]WriteResult, []error) {
	return s.recoverMany(ctx, reqs, true)
}
