package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// claimSQL raises the row's fence to the claimer's, if no newer one is
// there, and reads what it holds, in one statement. A fresh object's or a
// deleted generation's state is dropped by the claim, with its replies:
// it can never be restored, whoever loads next. The version changes (the
// next of meshloc.versions), so a write the previous holder still has in
// flight fails.
const claimSQL = `
WITH c AS (
	INSERT INTO meshloc.state AS s (object, object_generation, authority_generation, owner, version)
	VALUES ($1, $2, $3, $4, nextval('meshloc.versions'))
	ON CONFLICT (object) DO UPDATE SET
		object_generation = EXCLUDED.object_generation, authority_generation = EXCLUDED.authority_generation,
		owner = EXCLUDED.owner, version = EXCLUDED.version, updated_at = now(),
		state = CASE WHEN $6::bool OR s.object_generation <= $5::bigint THEN NULL ELSE s.state END,
		meta  = CASE WHEN $6::bool OR s.object_generation <= $5::bigint THEN NULL ELSE s.meta END
	WHERE (s.object_generation, s.authority_generation) <= (EXCLUDED.object_generation, EXCLUDED.authority_generation)
	RETURNING version, state, meta::text),
d AS (
	DELETE FROM meshloc.replies WHERE object = $1 AND EXISTS (SELECT 1 FROM c WHERE c.meta IS NULL))
SELECT c.version, c.state, c.meta,
	(SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}') FROM meshloc.replies r WHERE r.object = $1 AND c.meta IS NOT NULL),
	(SELECT coalesce(array_agg(r.reply::text ORDER BY r.id), '{}') FROM meshloc.replies r WHERE r.object = $1 AND c.meta IS NOT NULL)
FROM c`

// Load claims the object for c.Fence and reads its state (see claimSQL).
func (s *Store) Load(ctx context.Context, c statestore.Claim) (authority.StateRead, error) {
	if err := c.Validate(); err != nil {
		return authority.StateRead{}, err
	}
	return loadIn(ctx, s.pool, c)
}

// querier is the pool, or one transaction of it.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadIn is Load's claim and read through q.
func loadIn(ctx context.Context, q querier, c statestore.Claim) (authority.StateRead, error) {
	var (
		rd      authority.StateRead
		state   []byte
		meta    *string
		ids     []string
		replies []string
	)
	err := q.QueryRow(ctx, claimSQL, c.Object.String(), c.Fence.ObjectGeneration, c.Fence.AuthorityGeneration,
		owner(c.Fence), c.Deleted, c.Fresh).Scan(&rd.StateVersion, &state, &meta, &ids, &replies)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return rd, fmt.Errorf("%w: %s is claimed under a fence newer than o%d/a%d", statestore.ErrFenced, c.Object, c.Fence.ObjectGeneration, c.Fence.AuthorityGeneration)
	case err != nil:
		return rd, unavailable("claim "+c.Object.String(), err)
	case meta == nil:
		return rd, nil // nothing persisted (or nothing that may be restored)
	}
	v, err := authority.DecodeStateValue([]byte(*meta))
	if err != nil {
		return rd, fmt.Errorf("state of %s: %w", c.Object, err)
	}
	if v.Object != c.Object.String() {
		return rd, fmt.Errorf("%w: state of %s names %s", authority.ErrInvalidState, c.Object, v.Object)
	}
	v.State = state
	for i, id := range ids {
		rep, err := authority.DecodeReply(c.Object, id, []byte(replies[i]))
		if err != nil {
			return rd, err
		}
		rd.Replies = append(rd.Replies, rep)
	}
	rd.Found, rd.Value = true, v
	return rd, nil
}

// forgetSQL removes a deleted object's row and replies, unless a newer
// generation claimed the row since.
const forgetSQL = `
WITH f AS (DELETE FROM meshloc.state WHERE object = $1 AND object_generation <= $2 RETURNING 1)
DELETE FROM meshloc.replies WHERE object = $1 AND EXISTS (SELECT 1 FROM f)`

// Forget removes the state of obj's deleted generation (and older ones).
func (s *Store) Forget(ctx context.Context, obj keyspace.Object, deleted int64) error {
	if err := obj.Validate(); err != nil || deleted <= 0 {
		return fmt.Errorf("%w: forget %s generation %d", statestore.ErrInvalidRequest, obj, deleted)
	}
	if _, err := s.pool.Exec(ctx, forgetSQL, obj.String(), deleted); err != nil {
		return unavailable("forget "+obj.String(), err)
	}
	return nil
}
