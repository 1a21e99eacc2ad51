package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// Watch gives the record now, then every change in order, then the end.
func TestWatch(t *testing.T) {
	srv := etcdtest.Single(t)
	cli := etcdtest.Client(t, srv.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Etcd: cli})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	obj := keyspace.Actor("counter", "w1")
	key := keyspace.Default().Authority(obj)
	rec := func(gen int64) string {
		r := record.Record{Kind: keyspace.KindActor, Type: "counter", ObjectGeneration: 1, AuthorityGeneration: gen,
			Owner: record.OwnerRef{ID: "n1", Generation: 7}, Node: record.NodeRef{RoutingID: strings.Repeat("ab", 16), Address: "127.0.0.1:7100"},
			State: record.StateActive}
		return string(r.Encode())
	}
	if _, err := cli.Put(ctx, key, rec(1)); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ch, err := c.Watch(wctx, obj.String())
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Deleted || ev.Record.AuthorityGeneration != 1 || ev.Err != nil {
		t.Fatalf("first event %+v", ev)
	}
	if _, err := cli.Put(ctx, key, rec(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Record.AuthorityGeneration != 2 || ev.StoreVersion == 0 {
		t.Fatalf("second event %+v", ev)
	}
	if ev := <-ch; !ev.Deleted {
		t.Fatalf("third event %+v", ev)
	}
	stop()
	for ev := range ch {
		if ev.Err == nil {
			t.Fatalf("after the stop: %+v", ev)
		}
	}
	if _, err := c.Watch(ctx, "actor/x/../y"); err == nil {
		t.Error("a bad name was watched")
	}
}
