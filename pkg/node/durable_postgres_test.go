package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/pgtest"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Durable objects with their state in PostgreSQL (--state-store): the owner
// crashes and the survivor restores every acknowledged change from the
// database (a retry answered from the persisted replies, not run again);
// a relocation's target claims the state before it writes; a deleted
// object's state is removed; etcd holds the records and no state.
func TestDurablePostgres(t *testing.T) {
	dsn := pgtest.Start(t).NewDatabase(t)
	inPG := func(_ int, c *node.Config) { c.StateStore = dsn }
	m, px := cuttableMesh(t)
	n1 := m.addCut(t, px, "n1", inPG)
	n2 := m.add(t, "n2", inPG)
	n3 := m.add(t, "n3", inPG)
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: []string{n2.Address()}, Timeout: 30 * time.Second})

	const counter, empty = "actor/dcounter/pg", "actor/dcounter/pg-empty"
	for _, obj := range []string{counter, empty} { // empty is only read: nothing persisted before the crash
		if _, err := c.Call(ctx, obj, "get"); err != nil {
			t.Fatal(err)
		}
		m.moveTo(t, obj, n1)
	}
	for i := 1; i <= 20; i++ {
		if r, err := c.Call(ctx, counter, "add", "1"); err != nil || value(t, r) != int64(i) {
			t.Fatalf("add #%d: %+v %v", i, r, err)
		}
	}
	last := wire.NewOperationID()
	if r, err := c.CallOp(ctx, last, counter, "add", [][]byte{[]byte("1")}); err != nil || value(t, r) != 21 || r.Fence.Owner != n1.Self() {
		t.Fatalf("last add: %+v %v", r, err)
	}

	px.SetMode(tcpproxy.Blackhole) // n1 is cut off from etcd (not from PostgreSQL): its lease runs out
	waitFencedAndGone(ctx, t, m, n1)
	r, err := c.CallOp(ctx, last, counter, "add", [][]byte{[]byte("1")})
	if err != nil || !r.Replayed || value(t, r) != 21 || r.Fence.Owner == n1.Self() {
		t.Fatalf("retry of the acknowledged add after the crash: %+v %v; want 21 replayed by a survivor", r, err)
	}
	// Recovered with nothing persisted: its first write follows the claim.
	if r, err := c.Call(ctx, empty, "add", "1"); err != nil || value(t, r) != 1 {
		t.Fatalf("first add to an object recovered with nothing persisted: %+v %v", r, err)
	}
	m.moveTo(t, counter, n3)
	m.moveTo(t, counter, n2)
	if r, err := c.Call(ctx, counter, "add", "1"); err != nil || value(t, r) != 22 || r.Fence.Owner != n2.Self() {
		t.Fatalf("add after two relocations: %+v %v", r, err)
	}
	resp, err := m.etcd.Get(ctx, keyspace.Default().State(keyspace.Actor("dcounter", "pg")), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("etcd holds %d state keys (%v), want none: the state is in PostgreSQL", resp.Count, err)
	}

	if _, err := c.Call(ctx, counter, "delete"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.Call(ctx, counter, "get"); durableCode(err) != pb.Code_CODE_DELETED {
		t.Fatalf("call by a caller that knew the deleted object: %v, want deleted", err)
	}
	c2 := newClient(t, client.Config{Nodes: []string{n3.Address()}, Timeout: 30 * time.Second})
	if r, err := c2.Call(ctx, counter, "get"); err != nil || value(t, r) != 0 {
		t.Fatalf("the name's next object: %+v %v, want a fresh counter", r, err)
	}

	// An operator's delete (locationd's, in etcd alone): the awake owner
	// removes the row when it sees the record gone.
	const byOperator = "actor/dcounter/pg-op"
	if _, err := c2.Call(ctx, byOperator, "add", "3"); err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	rows := func() (n int) {
		if err := db.QueryRow(ctx, `SELECT count(*) FROM meshloc.state WHERE object = $1`, byOperator).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(); n != 1 {
		t.Fatalf("%d rows of %s before the delete", n, byOperator)
	}
	obj, _ := keyspace.ParseObject(byOperator)
	if _, res, err := authority.New(m.etcd, keyspace.Default()).DeleteObject(ctx, obj); err != nil || !res.Deleted {
		t.Fatalf("operator delete: %+v %v", res, err)
	}
	waitUntil(t, 10*time.Second, "the deleted object's row removed", func() error {
		if n := rows(); n != 0 {
			return fmt.Errorf("%d rows", n)
		}
		return nil
	})
}

// A state store beside etcd takes states of tens of megabytes: written
// whole, moved node to node by relocation's stream, restored after the
// owner's crash; a change over 64 MiB is refused with state_too_large
// naming the store's limit, and changes nothing.
func TestDurablePostgresLargeState(t *testing.T) {
	dsn := pgtest.Start(t).NewDatabase(t)
	inPG := func(_ int, c *node.Config) { c.StateStore = dsn }
	m, px := cuttableMesh(t)
	n1 := m.addCut(t, px, "n1", inPG)
	n2 := m.add(t, "n2", inPG)
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: []string{n2.Address()}, Timeout: time.Minute})
	const blob = "actor/dblob/large"
	if _, err := c.Call(ctx, blob, "size"); err != nil {
		t.Fatal(err)
	}
	m.moveTo(t, blob, n1)
	if _, err := c.Call(ctx, blob, "fill", fmt.Sprint(40<<20)); err != nil {
		t.Fatalf("fill 40 MiB: %v", err)
	}
	hash, err := c.Call(ctx, blob, "hash")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(ctx, blob, "fill", fmt.Sprint(65<<20))
	if durableCode(err) != pb.Code_CODE_STATE_TOO_LARGE || !strings.Contains(err.Error(), "postgres state store's limit of 67108864") {
		t.Fatalf("fill 65 MiB: %v, want state_too_large naming the postgres limit", err)
	}
	m.moveTo(t, blob, n2)
	m.moveTo(t, blob, n1)
	px.SetMode(tcpproxy.Blackhole)
	waitFencedAndGone(ctx, t, m, n1)
	r, err := c.Call(ctx, blob, "hash")
	if err != nil || string(r.Payload) != string(hash.Payload) || r.Fence.Owner != n2.Self() {
		t.Fatalf("hash after two moves and a crash: %+v (%v), want %s from n2", r, err, hash.Payload)
	}
}
