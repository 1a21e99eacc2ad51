package postgres_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/pgtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/statestore/postgres"
)

// rid is the reply id of operation n (ids sort as their operations came).
func rid(n int) string { return fmt.Sprintf("%032x", n) }

// writeReply persists seq under fe with the reply of operation op, keeping
// the replies from operation keep on.
func (f *fixture) writeReply(t *testing.T, obj keyspace.Object, fe authority.Fence, version int64, seq uint64, op, keep int) int64 {
	t.Helper()
	v := value(obj, fe, seq, fmt.Appendf(nil, "state %d", seq))
	res, err := f.s.Persist(f.ctx, authority.PersistRequest{Object: obj, Fence: fe, StoreVersion: 1, StateVersion: version, Value: v.Encode(), State: &v,
		Reply: &authority.StateReply{ID: rid(op), Value: authority.ReplyValue{Payload: []byte(`"ok"`)}}, KeepRepliesFrom: rid(keep)})
	if err != nil || res.Outcome != authority.PersistWritten {
		t.Fatalf("write %d (reply %d, keep from %d): %+v %v", seq, op, keep, res, err)
	}
	return res.StateVersion
}

// replyIDs are the ids of obj's reply rows, in order.
func (f *fixture) replyIDs(t *testing.T, obj keyspace.Object) []string {
	t.Helper()
	conn, err := pgx.Connect(f.ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(f.ctx)
	rows, err := conn.Query(f.ctx, `SELECT id FROM meshloc.replies WHERE object = $1 ORDER BY id`, obj.String())
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A write evicts from where the previous one stopped; a new owner that
// keeps from lower (its clock behind the old owner's) lowers that point,
// so no reply it keeps is lost and none it evicts later is left behind.
func TestReplyEviction(t *testing.T) {
	f := newFixture(t, pgtest.Start(t))
	obj := keyspace.Actor("dcounter", "evict")
	old, cur := fence(1, 1), fence(1, 2)
	rd, err := f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: old, Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	v := f.writeReply(t, obj, old, rd.StateVersion, 1, 10, 10)
	v = f.writeReply(t, obj, old, v, 2, 20, 10)
	f.writeReply(t, obj, old, v, 3, 30, 20)
	if got, want := f.replyIDs(t, obj), []string{rid(20), rid(30)}; !slices.Equal(got, want) {
		t.Fatalf("after evicting below 20: %v, want %v", got, want)
	}
	rd, err = f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: cur})
	if err != nil || len(rd.Replies) != 2 {
		t.Fatalf("new owner's load: %d replies, %v", len(rd.Replies), err)
	}
	v = f.writeReply(t, obj, cur, rd.StateVersion, 4, 15, 15) // its clock is behind
	if got, want := f.replyIDs(t, obj), []string{rid(15), rid(20), rid(30)}; !slices.Equal(got, want) {
		t.Fatalf("after a write keeping from 15: %v, want %v", got, want)
	}
	f.writeReply(t, obj, cur, v, 5, 40, 25)
	if got, want := f.replyIDs(t, obj), []string{rid(30), rid(40)}; !slices.Equal(got, want) {
		t.Fatalf("after evicting below 25: %v, want %v", got, want)
	}
}

// A database a node of schema version 1 wrote is migrated in place: its
// state and replies are read back, and writes go on.
func TestMigrationFromVersion1(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDatabase(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	obj := keyspace.Actor("dcounter", "old")
	v1 := value(obj, fence(1, 1), 7, []byte("written by version 1"))
	meta := v1
	meta.State = nil
	mb, err := json.Marshal(&meta) // as version 1 wrote it
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`CREATE SCHEMA meshloc; CREATE TABLE meshloc.schema_version (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
		postgres.Migrations[0],
		`INSERT INTO meshloc.schema_version (version) VALUES (1)`,
	} {
		if _, err := conn.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO meshloc.state (object, object_generation, authority_generation, owner, version, state, meta)
		VALUES ($1, 1, 1, 'n1@7', nextval('meshloc.versions'), $2, $3)`, obj.String(), v1.State, string(mb)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO meshloc.replies (object, id, reply) VALUES ($1, $2, '{"code":0}'), ($1, $3, '{"code":0}')`,
		obj.String(), rid(10), rid(20)); err != nil {
		t.Fatal(err)
	}
	c := etcdtest.Client(t, etcdtest.Single(t).Endpoint())
	s, err := postgres.Open(t.Context(), dsn, authority.New(c, keyspace.Default()))
	if err != nil {
		t.Fatalf("open over version 1: %v", err)
	}
	defer s.Close()
	f := &fixture{ctx: t.Context(), dsn: dsn, auth: authority.New(c, keyspace.Default()), s: s}
	rd, err := s.Load(t.Context(), statestore.Claim{Object: obj, Fence: fence(1, 2)})
	if err != nil || string(rd.Value.State) != "written by version 1" || rd.Value.Seq != 7 || len(rd.Replies) != 2 {
		t.Fatalf("load after the migration: %+v %v", rd, err)
	}
	f.writeReply(t, obj, fence(1, 2), rd.StateVersion, 8, 30, 20)
	if got, want := f.replyIDs(t, obj), []string{rid(20), rid(30)}; !slices.Equal(got, want) {
		t.Fatalf("replies after the first write: %v, want %v", got, want)
	}
}
