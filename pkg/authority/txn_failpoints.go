//go:build failpoints

package authority

import "context"

// CommitWithoutCompare is Commit without its record compares (the owner
// key's stays): the planted bug commit-without-compare of internal/failpoint,
// which a test build's node puts in its Store seam. It exists in test builds
// only.
func (s *Store) CommitWithoutCompare(ctx context.Context, req CommitRequest) (CommitResult, error) {
	return s.commit(ctx, req, false)
}
