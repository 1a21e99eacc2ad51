package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/pgtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/statestore/postgres"
	"github.com/meshloc/meshloc/pkg/statestore/statestoretest"
)

// The PostgreSQL store passes the conformance suite, each case on a
// database of its own.
func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	statestoretest.Run(t, func(t *testing.T, auth *authority.Store) statestore.Store {
		s, err := postgres.Open(context.Background(), srv.NewDatabase(t), auth)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// fixture is a store on a new database, over a new etcd.
type fixture struct {
	ctx  context.Context
	dsn  string
	auth *authority.Store
	s    *postgres.Store
}

func newFixture(t testing.TB, srv *pgtest.Server) *fixture {
	c := etcdtest.Client(t, etcdtest.Single(t).Endpoint())
	f := &fixture{ctx: context.Background(), dsn: srv.NewDatabase(t), auth: authority.New(c, keyspace.Default())}
	var err error
	if f.s, err = postgres.Open(f.ctx, f.dsn, f.auth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.s.Close() })
	return f
}

func fence(og, ag int64) authority.Fence {
	return authority.Fence{Owner: authority.OwnerRef{ID: "n1", Generation: 7}, ObjectGeneration: og, AuthorityGeneration: ag}
}

func value(obj keyspace.Object, f authority.Fence, seq uint64, state []byte) authority.StateValue {
	return authority.StateValue{V: authority.StateVersion1, Object: obj.String(), ObjectGeneration: f.ObjectGeneration,
		AuthorityGeneration: f.AuthorityGeneration, Owner: f.Owner, Seq: seq, State: state, ReplyWindowMs: 60000, ReplyMaxEntries: 16}
}

// write persists state under f at stateVersion (no schedule: etcd's
// record is not consulted by a write here).
func (f *fixture) write(obj keyspace.Object, fe authority.Fence, stateVersion int64, seq uint64, state []byte) (authority.PersistResult, error) {
	v := value(obj, fe, seq, state)
	return f.s.Persist(f.ctx, authority.PersistRequest{Object: obj, Fence: fe, StoreVersion: 1, StateVersion: stateVersion, Value: v.Encode(), State: &v})
}

// The rule that makes a store beside etcd safe, step by step: a write of
// the old owner that lands before the new owner's claim is what the claim
// loads (acknowledged, not lost); after the claim the old owner can write
// no more, and cannot claim back.
func TestFencingAcrossTwoSystems(t *testing.T) {
	f := newFixture(t, pgtest.Start(t))
	obj := keyspace.Actor("dcounter", "paused")
	old, cur := fence(1, 1), fence(2, 3)
	rd, err := f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: old, Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.write(obj, old, rd.StateVersion, 1, []byte("acked before the takeover"))
	if err != nil || res.Outcome != authority.PersistWritten {
		t.Fatalf("old owner's write: %+v %v", res, err)
	}
	// etcd now names the new owner, which claims, then loads.
	rd, err = f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: cur})
	if err != nil || !rd.Found || string(rd.Value.State) != "acked before the takeover" {
		t.Fatalf("new owner's load: %+v %v", rd, err)
	}
	// The old owner, paused until now, writes at the version it knew.
	res, err = f.write(obj, old, res.StateVersion, 2, []byte("lost write"))
	if err != nil || res.Outcome != authority.PersistSuperseded {
		t.Fatalf("old owner's write after the claim: %+v %v", res, err)
	}
	if _, err := f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: old}); !errors.Is(err, statestore.ErrFenced) {
		t.Fatalf("old owner's claim after the new one: %v, want ErrFenced", err)
	}
	// A write the new owner's own claim overtook (a re-activation under the
	// same fence) fails on the version.
	res, err = f.write(obj, cur, rd.StateVersion-1, 2, []byte("overtaken"))
	if err != nil || res.Outcome != authority.PersistStateMoved {
		t.Fatalf("a write at a version before the claim: %+v %v", res, err)
	}
	rd2, err := f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: cur})
	if err != nil || string(rd2.Value.State) != "acked before the takeover" {
		t.Fatalf("state after the refused writes: %+v %v", rd2, err)
	}
}

// A state of tens of megabytes is written and restored whole.
func TestLargeState(t *testing.T) {
	f := newFixture(t, pgtest.Start(t))
	obj := keyspace.Actor("blob", "large")
	fe := fence(1, 1)
	big := bytes.Repeat([]byte("0123456789abcdef"), 24<<20/16)
	rd, err := f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: fe, Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := f.write(obj, fe, rd.StateVersion, 1, big); err != nil || res.Outcome != authority.PersistWritten {
		t.Fatalf("write 24 MiB: %+v %v", res, err)
	}
	rd, err = f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: fence(1, 2)})
	if err != nil || !bytes.Equal(rd.Value.State, big) {
		t.Fatalf("restored %d bytes, want %d: %v", len(rd.Value.State), len(big), err)
	}
}

// Migration is idempotent, and a database migrated by a newer node is
// refused with a clear error.
func TestSchemaVersions(t *testing.T) {
	f := newFixture(t, pgtest.Start(t))
	s2, err := postgres.Open(f.ctx, f.dsn, f.auth)
	if err != nil {
		t.Fatalf("second open: %v", err)
	}
	s2.Close()
	conn, err := pgx.Connect(f.ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(f.ctx)
	var n int
	if err := conn.QueryRow(f.ctx, `SELECT count(*) FROM meshloc.schema_version`).Scan(&n); err != nil || n != postgres.SchemaVersion {
		t.Fatalf("schema versions recorded: %d (%v), want %d", n, err, postgres.SchemaVersion)
	}
	if _, err := conn.Exec(f.ctx, `INSERT INTO meshloc.schema_version (version) VALUES ($1)`, postgres.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(f.ctx, f.dsn, f.auth); !errors.Is(err, postgres.ErrSchema) {
		t.Fatalf("open of a newer schema: %v, want ErrSchema", err)
	}
}
