package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// persistSQL writes one change if the row still carries the writer's fence
// and the version it last saw, and with it, in the same statement, evicts
// the replies older than the oldest one kept ($8; the empty string: none) and puts
// the change's reply. The eviction starts where the previous one stopped
// (replies_from: every reply row's id is at least it, as every write puts
// a reply at or above what it keeps and moves the mark there), so a hot
// object's write does not walk every reply it ever deleted, whose index
// entries stay until VACUUM. A writer that keeps from below the mark (a
// new owner whose clock is behind) evicts nothing and lowers it. The mark
// read in o is the one the version compared: a write committed since
// changed the version, and this one matches no row.
const persistSQL = `
WITH w AS (
	UPDATE meshloc.state s SET version = nextval('meshloc.versions'), state = $5::bytea, meta = $6::jsonb, owner = $7, updated_at = now(), replies_from = $8::text
	FROM (SELECT replies_from AS prev FROM meshloc.state WHERE object = $1) o
	` + fencedWhere + `
	RETURNING s.version, CASE WHEN $8::text = '' THEN '' ELSE o.prev END AS low),
d AS (
	DELETE FROM meshloc.replies WHERE object = $1 AND id >= (SELECT low FROM w) AND ($8::text = '' OR id < $8::text)),
i AS (
	INSERT INTO meshloc.replies (object, id, reply) SELECT $1, $9::text, $10::jsonb FROM w WHERE $9::text <> ''
	ON CONFLICT (object, id) DO UPDATE SET reply = EXCLUDED.reply)
SELECT version FROM w`

// fencedWhere is the write's condition: the writer's fence, the version it saw.
const fencedWhere = "WHERE s.object = $1 AND s.object_generation = $2 AND s.authority_generation = $3 AND s.version = $4"

// rowSQL reads what decides a write that did not happen.
const rowSQL = `SELECT object_generation, authority_generation, version, (meta->>'seq')::numeric::text FROM meshloc.state WHERE object = $1`

// Persist writes req (see persistSQL). The schedule entries it sets are put
// in etcd first, fenced by the record (authority PutSchedule), and the ones
// it fired removed after (DropSchedule). A database error is resolved by
// reading the row back: written iff it carries the writer's fence and its
// write's sequence number.
func (s *Store) Persist(ctx context.Context, req authority.PersistRequest) (authority.PersistResult, error) {
	return s.persistWith(ctx, req, persistSQL)
}

// persistWith is Persist with the write statement stmt (a test build's
// planted bug passes another).
func (s *Store) persistWith(ctx context.Context, req authority.PersistRequest, stmt string) (authority.PersistResult, error) {
	if err := req.Validate(); err != nil {
		return authority.PersistResult{}, err
	}
	if req.State == nil || req.State.Object != req.Object.String() {
		return authority.PersistResult{}, fmt.Errorf("%w: persist of %s without its StateValue, or with another object's", statestore.ErrInvalidRequest, req.Object)
	}
	if len(req.Schedule) > 0 {
		res, err := s.auth.PutSchedule(ctx, req)
		if err != nil || res.Outcome != authority.PersistWritten {
			return res, err
		}
	}
	meta := *req.State
	meta.State = nil
	mb, err := json.Marshal(&meta)
	if err != nil {
		return authority.PersistResult{}, fmt.Errorf("%w: %v", statestore.ErrInvalidRequest, err)
	}
	var replyID string
	var reply *string // NULL without a reply: '' is no JSON
	if req.Reply != nil {
		r := string(req.Reply.Value.Encode())
		replyID, reply = req.Reply.ID, &r
	}
	state := req.State.State
	if state == nil {
		state = []byte{} // a snapshot may be empty; NULL means nothing persisted
	}
	var version int64
	err = s.pool.QueryRow(ctx, stmt, req.Object.String(), req.Fence.ObjectGeneration, req.Fence.AuthorityGeneration, req.StateVersion,
		state, string(mb), owner(req.Fence), req.KeepRepliesFrom, replyID, reply).Scan(&version)
	switch {
	case err == nil:
		s.dropSchedule(ctx, req)
		return authority.PersistResult{Outcome: authority.PersistWritten, StateVersion: version}, nil
	case errors.Is(err, pgx.ErrNoRows):
		return s.judge(ctx, req, false)
	}
	res, rerr := s.judge(ctx, req, true)
	if rerr != nil {
		return authority.PersistResult{}, fmt.Errorf("%w: persist %s: %w (read-back: %w)", authority.ErrUncertain, req.Object, err, rerr)
	}
	if res.Outcome == authority.PersistWritten {
		s.dropSchedule(ctx, req)
	}
	return res, nil
}

// dropSchedule removes the entries a written change fired. An entry left
// by a failure here fires again under the same operation id, and the
// persisted reply answers it.
func (s *Store) dropSchedule(ctx context.Context, req authority.PersistRequest) {
	if len(req.Unschedule) > 0 {
		_ = s.auth.DropSchedule(ctx, req)
	}
}

// judge reads the row to say why req was not written (resolve: after a
// database error, when it may have been).
func (s *Store) judge(ctx context.Context, req authority.PersistRequest, resolve bool) (authority.PersistResult, error) {
	var og, ag, version int64
	var seq *string
	err := s.pool.QueryRow(ctx, rowSQL, req.Object.String()).Scan(&og, &ag, &version, &seq)
	res := authority.PersistResult{Resolved: resolve, StateVersion: version}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		res.StateVersion = 0
		return s.superseded(ctx, req, res)
	case err != nil:
		return res, unavailable("read back "+req.Object.String(), err)
	case og != req.Fence.ObjectGeneration || ag != req.Fence.AuthorityGeneration:
		return s.superseded(ctx, req, res)
	case resolve && version != req.StateVersion && seq != nil && *seq == fmt.Sprint(req.State.Seq):
		// The writer's fence and its write's sequence: every other write
		// under this fence has another (a re-claim loads the sequence).
		res.Outcome = authority.PersistWritten
	case version != req.StateVersion:
		res.Outcome = authority.PersistStateMoved
	default:
		res.Outcome = authority.PersistNotWritten
	}
	return res, nil
}

// superseded is res for a writer a newer owner fenced out, with the record
// that names that owner (when etcd answers), to send the caller there.
func (s *Store) superseded(ctx context.Context, req authority.PersistRequest, res authority.PersistResult) (authority.PersistResult, error) {
	res.Outcome = authority.PersistSuperseded
	if snap, err := s.auth.Read(ctx, req.Object); err == nil && snap.Fence() != req.Fence {
		res.Current, res.Found = snap, true
	}
	return res, nil
}
