//go:build failpoints

package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// The planted bugs of internal/failpoint that act in this store, each a
// method a test build's node puts in its state store seam (pkg/node/
// faults StateStore). They exist in test builds only.

// PersistUnfenced is Persist whose UPDATE compares neither the row's fence
// nor its version: the planted bug state-write-skips-fence. A write held
// past a takeover lands over what the new owner wrote.
func (s *Store) PersistUnfenced(ctx context.Context, req authority.PersistRequest) (authority.PersistResult, error) {
	return s.persistWith(ctx, req, unfencedSQL)
}

// unfencedSQL is persistSQL without its fence and version compares (its
// parameters still bound).
var unfencedSQL = strings.Replace(persistSQL, fencedWhere,
	"WHERE s.object = $1 AND $2::bigint > 0 AND $3::bigint > 0 AND $4::bigint >= 0", 1)

// LoadBeforeClaim reads the state first and claims it after, as two
// statements, with between(ctx) in the gap: the planted bug
// state-load-before-claim. A write of the previous owner that lands in the
// gap is neither loaded nor refused, and the new owner serves without it.
func (s *Store) LoadBeforeClaim(ctx context.Context, c statestore.Claim, between func()) (authority.StateRead, error) {
	if err := c.Validate(); err != nil {
		return authority.StateRead{}, err
	}
	var fenced bool
	err := s.pool.QueryRow(ctx, `SELECT (object_generation, authority_generation) > ($2::bigint, $3::bigint) FROM meshloc.state WHERE object = $1`,
		c.Object.String(), c.Fence.ObjectGeneration, c.Fence.AuthorityGeneration).Scan(&fenced)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s.Load(ctx, c) // nothing to read before
	case err != nil:
		return authority.StateRead{}, unavailable("read "+c.Object.String(), err)
	case fenced:
		return authority.StateRead{}, fmt.Errorf("%w: %s", statestore.ErrFenced, c.Object)
	}
	// The read: a claim under the row's own fence would bump the version;
	// the bug reads what a claim would return, without raising anything.
	early, err := s.peek(ctx, c)
	if err != nil {
		return early, err
	}
	between()
	rd, err := s.Load(ctx, c) // the raise, after the read
	if err != nil {
		return rd, err
	}
	early.StateVersion = rd.StateVersion // the writes go on from the claim's version
	return early, nil
}

// peek is what Load would read for c, without claiming.
func (s *Store) peek(ctx context.Context, c statestore.Claim) (authority.StateRead, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return authority.StateRead{}, unavailable("read "+c.Object.String(), err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a read: rolled back
	return loadIn(ctx, tx, c)
}
