package authority_test

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// silent is a watch path that delivers nothing (a fan-out that stopped):
// its watches stay open until their context ends.
type silent struct{}

func (silent) Watch(ctx context.Context, _ string, _ ...clientv3.OpOption) clientv3.WatchChan {
	ch := make(chan clientv3.WatchResponse)
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}
func (silent) RequestProgress(context.Context) error { return nil }
func (silent) Close() error                          { return nil }

// fakeClock is a test's time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func at(s int) time.Time             { return time.Unix(1_000_000+int64(s), 0) }
func waitFresh(t *testing.T, c *authority.Cache, want time.Time) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !c.FreshAt().Equal(want); {
		if time.Now().After(deadline) {
			t.Fatalf("FreshAt %v, want %v", c.FreshAt(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// docs/design.md §5: FreshAt is when a read of etcd was sent whose
// revision the watch has since delivered — the load's, then each
// barrier's. A barrier the watch path never reaches (it delivers nothing)
// leaves FreshAt where it was, however often etcd itself answers.
func TestFreshnessIsTheSendTimeOfAReachedRead(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	clock := &fakeClock{t: at(0)}

	cache := authority.NewCache(c, keys)
	authority.SetCacheClock(cache, clock.now)
	runCache(t, cache)
	if !cache.FreshAt().Equal(at(0)) {
		t.Fatalf("after the load: %v, want its start %v", cache.FreshAt(), at(0))
	}
	activate(t, s, keyspace.Actor("counter", "f1"), src)
	clock.set(at(10))
	if !cache.Barrier(context.Background(), 10*time.Second) {
		t.Fatal("etcd did not answer")
	}
	clock.set(at(20)) // the answer arriving later does not count
	waitFresh(t, cache, at(10))

	stuck := authority.NewCache(c, keys, authority.WatchVia(silent{}))
	authority.SetCacheClock(stuck, clock.now)
	runCache(t, stuck)
	if !stuck.FreshAt().Equal(at(20)) {
		t.Fatalf("after the load: %v", stuck.FreshAt())
	}
	activate(t, s, keyspace.Actor("counter", "f2"), src)
	for i := range 3 {
		clock.set(at(30 + i))
		if !stuck.Barrier(context.Background(), 10*time.Second) {
			t.Fatal("etcd did not answer")
		}
	}
	if got := stuck.FreshAt(); !got.Equal(at(20)) {
		t.Fatalf("a cache whose watch delivers nothing became fresh at %v", got)
	}
	// With no change since its load, a barrier is reached at once.
	idle := authority.NewCache(c, keys, authority.WatchVia(silent{}))
	authority.SetCacheClock(idle, clock.now)
	runCache(t, idle)
	clock.set(at(40))
	idle.Barrier(context.Background(), 10*time.Second)
	if got := idle.FreshAt(); !got.Equal(at(40)) {
		t.Fatalf("an up-to-date cache: FreshAt %v, want %v", got, at(40))
	}
}
