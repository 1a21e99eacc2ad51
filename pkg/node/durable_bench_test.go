package node_test

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/client"
)

// BenchmarkDurableAdd compares, in one run against one embedded etcd: a raw
// etcd put transaction guarded by a ModRevision compare (the floor of a
// durable write), an add on a memory counter, and an add on a durable
// counter (the add, its fenced persist transaction, the reply), both through
// the Go client straight to the owner; and a read of the durable counter
// (nothing changed: no write).
//
//	go test -run '^$' -bench BenchmarkDurableAdd -benchtime 3000x -count 3 ./pkg/node/
func BenchmarkDurableAdd(b *testing.B) {
	m := startMesh(b, 1)
	ctx := context.Background()
	c := newClient(b, client.Config{Etcd: m.etcd})
	for _, obj := range []string{"actor/counter/bench", "actor/dcounter/bench"} {
		if _, err := c.Call(ctx, obj, "add", "1"); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("etcd-txn-put", func(b *testing.B) {
		key := "/bench/durable/raw"
		resp, err := m.etcd.Put(ctx, key, "0")
		if err != nil {
			b.Fatal(err)
		}
		rev := resp.Header.Revision
		i := 0
		timed(b, func() error {
			i++
			tr, err := m.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, fmt.Sprint(i))).Commit()
			if err == nil && !tr.Succeeded {
				err = fmt.Errorf("compare failed at %d", rev)
			}
			if err == nil {
				rev = tr.Header.Revision
			}
			return err
		})
	})
	b.Run("memory-add", func(b *testing.B) {
		timed(b, func() error { _, err := c.Call(ctx, "actor/counter/bench", "add", "1"); return err })
	})
	b.Run("durable-add", func(b *testing.B) {
		timed(b, func() error { _, err := c.Call(ctx, "actor/dcounter/bench", "add", "1"); return err })
	})
	b.Run("durable-get", func(b *testing.B) {
		timed(b, func() error { _, err := c.Call(ctx, "actor/dcounter/bench", "get"); return err })
	})
}
