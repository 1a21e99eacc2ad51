package recovery_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// An orphan a bulk intent moves (the one-write rule: the intent in the
// bulk's key, not in the record) to a live target is left to that target
// until the intent's deadline plus the grace; then it is recovered, and the
// expired key with its fence is swept.
func TestRecoverWaitsForBulkTarget(t *testing.T) {
	srv := etcdtest.Single(t)
	cli := etcdtest.Client(t, srv.Endpoint())
	ctx := context.Background()
	st := authority.New(cli, keys)
	ghost := startOwner(t, cli, "ghost")
	tgt := startOwner(t, cli, "tgt", "counter")
	moving := keyspace.Actor("counter", "moving")
	res, err := st.Activate(ctx, authority.ActivateRequest{Object: moving, Owner: ref(ghost), Node: authority.NodeRef{RoutingID: strings.Repeat("ab", 16), Address: "127.0.0.1:1"}})
	if err != nil || !res.Won {
		t.Fatal(res, err)
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	w, err := st.WriteBulkIntent(ctx, "bulk1", authority.BulkIntent{Source: ref(ghost), Target: ref(tgt),
		TargetNode: authority.NodeRef{RoutingID: strings.Repeat("cd", 16), Address: "127.0.0.1:2"}, DeadlineMs: deadline.UnixMilli(),
		Units: []authority.BulkUnit{{Object: moving.String(), RelocationID: "r1", NonceHash: record.HashNonce([]byte("n")), StoreVersion: res.Snapshot.StoreVersion}}})
	if err != nil || !w.Written {
		t.Fatal(w, err)
	}
	if err := ghost.Close(ctx); err != nil { // revokes its lease: the object is an orphan
		t.Fatal(err)
	}
	leftToTarget(t, cli, st, moving, ref(tgt), deadline)
	waitFor(t, "the expired bulk intent swept", 30*time.Second, func() error {
		// The sweep runs when a step lists the bulk intents: the recovery
		// of this orphan was one.
		got, err := cli.Get(ctx, keys.RelocationsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil || len(got.Kvs) != 0 {
			return fmt.Errorf("relocations/ holds %v (%v)", got.Kvs, err)
		}
		return nil
	})
}

// leftToTarget starts a leading recovery controller (grace 500 ms) and
// checks that it sees the orphan moving, leaves it to its target tgt
// before deadline, and recovers it there (object generation 2) only after
// deadline plus the grace.
func leftToTarget(t *testing.T, cli *clientv3.Client, st *authority.Store, moving keyspace.Object, tgt authority.OwnerRef, deadline time.Time) *running {
	t.Helper()
	ctx := context.Background()
	const grace = 500 * time.Millisecond
	rec := start(t, cli, "r", func(c *recovery.Config) { c.Recover, c.Grace, c.Retry = true, grace, 200*time.Millisecond })
	leads(t, cli, rec, 30*time.Second)
	waitFor(t, "orphans seen", 30*time.Second, func() error {
		if n := rec.c.Status().Orphans; n == 0 {
			return fmt.Errorf("no orphans yet")
		}
		return nil
	})
	if time.Now().Before(deadline) { // the check is only meaningful before the deadline
		if got, _ := st.Read(ctx, moving); got.Record.Owner.ID != "ghost" {
			t.Fatalf("recovered before its move's deadline: %+v", got.Record)
		}
	}
	waitFor(t, "recovered after the deadline and grace", 30*time.Second, func() error {
		got, err := st.Read(ctx, moving)
		if err != nil || got.Record.Owner != tgt || got.Record.Intent != nil || got.Record.ObjectGeneration != 2 {
			return fmt.Errorf("%+v %v", got.Record, err)
		}
		return nil
	})
	if time.Now().Before(deadline.Add(grace)) {
		t.Fatalf("recovered before the deadline plus grace")
	}
	return rec
}
