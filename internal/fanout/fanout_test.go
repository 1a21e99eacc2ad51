package fanout

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const served = "/t/a/"

// rig is an etcd, a fan-out in front of it serving served, and the
// fan-out's address.
type rig struct {
	etcd *clientv3.Client
	hub  *Server
	addr string
}

func setup(t *testing.T, o Options) *rig {
	t.Helper()
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	o.Ranges = append(o.Ranges, Prefix(served))
	o.Registry = prometheus.NewRegistry()
	hub, err := New(c, o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	hub.Register(g)
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	t.Cleanup(func() { g.Stop(); wg.Wait(); hub.Close() })
	return &rig{etcd: c, hub: hub, addr: lis.Addr().String()}
}

// client is a clientv3 client of the fan-out.
func (r *rig) client(t *testing.T) *clientv3.Client {
	return etcdtest.Client(t, "http://"+r.addr)
}

type seen struct {
	key  string
	rev  int64
	kind string
}

func eventsOf(resp clientv3.WatchResponse) []seen {
	var out []seen
	for _, ev := range resp.Events {
		out = append(out, seen{string(ev.Kv.Key), ev.Kv.ModRevision, ev.Type.String()})
	}
	return out
}

// collect follows wch until it has seen revision upTo (an event or a
// progress notification of it), and returns the events.
func collect(t *testing.T, wch clientv3.WatchChan, upTo int64) []seen {
	t.Helper()
	var out []seen
	timeout := time.After(60 * time.Second)
	for {
		select {
		case resp, ok := <-wch:
			if !ok {
				t.Fatalf("watch closed after %d events", len(out))
			}
			if err := resp.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			out = append(out, eventsOf(resp)...)
			if n := len(resp.Events); (n > 0 && resp.Events[n-1].Kv.ModRevision >= upTo) || (resp.IsProgressNotify() && resp.Header.Revision >= upTo) {
				return out
			}
		case <-timeout:
			t.Fatalf("watch did not reach revision %d (%d events)", upTo, len(out))
		}
	}
}

// history is what etcd itself sends a watcher of served from rev.
func (r *rig) history(t *testing.T, from, upTo int64) []seen {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	return collect(t, r.etcd.Watch(ctx, served, clientv3.WithPrefix(), clientv3.WithRev(from)), upTo)
}

// Followers that join at different revisions while records change — one so
// far behind that the history no longer holds its start — each receive
// exactly the events etcd would have sent them, in order, none twice.
func TestFollowersSeeWhatEtcdWouldSend(t *testing.T) {
	r := setup(t, Options{History: 40})
	ctx := context.Background()
	start, err := r.etcd.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	write := func(from, to int) int64 {
		var rev int64
		for i := from; i < to; i++ {
			var resp *clientv3.TxnResponse
			ops := []clientv3.Op{clientv3.OpPut(fmt.Sprintf("%sk%02d", served, i%30), fmt.Sprint(i))}
			if i%7 == 0 {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sk%02d", served, (i+1)%30), "pair")) // two events at one revision
			}
			if i%11 == 0 {
				ops = append(ops, clientv3.OpDelete(fmt.Sprintf("%sk%02d", served, (i+5)%30)))
			}
			resp, err = r.etcd.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.etcd.Put(ctx, "/t/b/other", fmt.Sprint(i)); err != nil { // outside the range
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		return rev
	}
	type follower struct {
		from   int64
		cancel context.CancelFunc
		wch    clientv3.WatchChan
	}
	var fs []follower
	follow := func(from int64) {
		c := r.client(t)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		t.Cleanup(cancel)
		fs = append(fs, follower{from, cancel, c.Watch(wctx, served, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())})
	}
	follow(start.Header.Revision + 1) // the first: it opens the shared watch
	mid := write(0, 100)
	follow(mid + 1)  // at the shared watch's head
	follow(mid - 20) // behind, within the history
	// Far behind: a catch-up, once the shared watch has seen mid (before
	// that its history still reaches back to the start).
	r.waitFeedPos(t, mid)
	follow(start.Header.Revision + 1)
	last := write(100, 300)
	follow(last + 1) // ahead of every event
	end := write(300, 320)
	for i, f := range fs {
		got := collect(t, f.wch, end)
		want := r.history(t, f.from, end)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("follower %d from %d: %d events, etcd sends %d\ngot  %v\nwant %v", i, f.from, len(got), len(want), got, want)
		}
	}
	if n := value(r.hub.m.catchups); n < 1 {
		t.Fatalf("catch-ups %v, want at least one", n)
	}
	if n := value(r.hub.m.clients); n != float64(len(fs)) {
		t.Fatalf("client watchers %v, want %d", n, len(fs))
	}
	for _, f := range fs {
		f.cancel()
	}
}

// waitFeedPos waits until every shared watch has received revision rev.
func (r *rig) waitFeedPos(t *testing.T, rev int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		behind := false
		r.hub.mu.Lock()
		for _, f := range r.hub.feeds {
			f.mu.Lock()
			behind = behind || f.pos < rev
			f.mu.Unlock()
		}
		r.hub.mu.Unlock()
		if !behind {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shared watch did not reach revision %d", rev)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// value reads a gauge or a counter.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// etcdWatchers is etcd's own count of the watchers it serves (this
// process's embedded members).
func etcdWatchers(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_debugging_mvcc_watcher_total" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("etcd_debugging_mvcc_watcher_total not found")
	return 0
}

// However many clients follow the range through the fan-out, etcd serves
// one watcher for them; the same clients straight on etcd cost one each.
func TestEtcdServesOneWatcherForAllFollowers(t *testing.T) {
	r := setup(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := etcdWatchers(t)
	var wchs []clientv3.WatchChan
	add := func(c *clientv3.Client, n int) {
		for range n {
			wchs = append(wchs, c.Watch(ctx, served, clientv3.WithPrefix()))
		}
	}
	// all have started once each has seen a change made after it was added
	settle := func() {
		resp, err := r.etcd.Put(ctx, served+"k", "v")
		if err != nil {
			t.Fatal(err)
		}
		for _, wch := range wchs {
			collect(t, wch, resp.Header.Revision)
		}
	}
	add(r.client(t), 1)
	settle()
	one := etcdWatchers(t) - base
	for range 7 {
		add(r.client(t), 1) // a client (a stream) each, as nodes would
	}
	settle()
	if eight := etcdWatchers(t) - base; eight != one {
		t.Fatalf("etcd serves %v watchers for 8 followers through the fan-out, %v for one", eight, one)
	}
	add(r.etcd, 8)
	settle()
	if direct := etcdWatchers(t) - base; direct != one+8 {
		t.Fatalf("8 followers straight on etcd: %v watchers, want %v", direct, one+8)
	}
}

// A client's ProgressRequest makes the fan-out ask etcd, and the answer
// reaches the client's watch: a notification of a revision at least that
// of a write made before the request, although no event of the range
// came with it. A watch of another range from a future revision (the
// first, opening that range's shared watch) holds nothing back.
func TestProgressRequestIsAnswered(t *testing.T) {
	const other = "/t/c/"
	r := setup(t, Options{Ranges: []Range{Prefix(other)}})
	ctx := context.Background()
	now, err := r.etcd.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	future := r.client(t).Watch(ctx, other, clientv3.WithPrefix(), clientv3.WithRev(now.Header.Revision+5), clientv3.WithCreatedNotify())
	<-future
	c := r.client(t)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.Watch(wctx, served, clientv3.WithPrefix(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	<-wch // created
	resp, err := r.etcd.Put(ctx, "/t/b/outside", "v")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			// (Made again until answered: etcd answers a stream only
			// while every watcher of it is synced.)
			if err := c.RequestProgress(wctx); err != nil {
				t.Fatal(err)
			}
		case w := <-wch:
			if len(w.Events) > 0 || !w.IsProgressNotify() {
				t.Fatalf("unexpected %+v", w)
			}
			if w.Header.Revision >= resp.Header.Revision {
				return
			}
		case <-deadline:
			t.Fatal("no progress notification")
		}
	}
}

// A watch from a compacted revision gets etcd's compaction answer, whether
// it opens the shared watch or catches up beside one; the followers of a
// shared watch are not disturbed by another's catch-up failing.
func TestCompactedStartIsForwarded(t *testing.T) {
	r := setup(t, Options{History: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rev int64
	for i := range 20 {
		resp, err := r.etcd.Put(ctx, fmt.Sprintf("%sk%d", served, i), "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := r.etcd.Compact(ctx, rev-5, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	c := r.client(t)
	compacted := func() {
		t.Helper()
		for resp := range c.Watch(ctx, served, clientv3.WithPrefix(), clientv3.WithRev(2)) {
			if errors.Is(resp.Err(), rpctypes.ErrCompacted) && resp.CompactRevision == rev-5 {
				return
			}
			t.Fatalf("got %+v (%v), want compacted at %d", resp, resp.Err(), rev-5)
		}
		t.Fatal("watch closed without an answer")
	}
	compacted() // opens the shared watch at a compacted revision
	live := c.Watch(ctx, served, clientv3.WithPrefix(), clientv3.WithRev(rev-2))
	var last int64
	for i := range 10 { // more than the history holds
		resp, err := r.etcd.Put(ctx, fmt.Sprintf("%sk%d", served, i), "w")
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}
	collect(t, live, last)
	compacted() // catches up beside the shared watch
	resp, err := r.etcd.Put(ctx, served+"after", "v")
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(t, live, resp.Header.Revision); len(got) != 1 || got[0].rev != resp.Header.Revision {
		t.Fatalf("the live follower after another's compacted catch-up: %v", got)
	}
}

// A watch of a range the fan-out does not serve (another prefix, one key of
// its prefix) is refused at creation with the reason.
func TestOtherRangesAreRefused(t *testing.T) {
	r := setup(t, Options{})
	c := r.client(t)
	for _, w := range []struct {
		key  string
		opts []clientv3.OpOption
	}{{"/t/b/", []clientv3.OpOption{clientv3.WithPrefix()}}, {served + "k1", nil}, {served, []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV()}}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, ok := <-c.Watch(ctx, w.key, w.opts...)
		cancel()
		if ok && resp.Err() == nil {
			t.Fatalf("watch of %s %v served: %+v", w.key, w.opts, resp)
		}
	}
}

// A follower that starts more than etcd's catch-up batch (1,000 revisions)
// behind, while the others follow live and nothing else changes, receives
// every event: its batches are headed with the current revision, which it
// must not take for its position (etcd's grpcproxy does, and skips the
// events between).
func TestFollowerFarBehindGetsEveryEvent(t *testing.T) {
	r := setup(t, Options{History: 100})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start, err := r.etcd.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	from := start.Header.Revision + 1
	live := r.client(t).Watch(ctx, served, clientv3.WithPrefix(), clientv3.WithRev(from))
	var last int64
	for i := range 2500 {
		resp, err := r.etcd.Put(ctx, fmt.Sprintf("%sk%d", served, i%10), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}
	collect(t, live, last)
	late := r.client(t).Watch(ctx, served, clientv3.WithPrefix(), clientv3.WithRev(from))
	got := collect(t, late, last)
	for i, ev := range got {
		if ev.rev != from+int64(i) {
			t.Fatalf("the late follower's event %d is of revision %d, want %d (every revision from %d to %d)", i, ev.rev, from+int64(i), from, last)
		}
	}
	if len(got) != 2500 {
		t.Fatalf("the late follower got %d events, want 2500", len(got))
	}
	resp, err := r.etcd.Put(ctx, served+"after", "v")
	if err != nil {
		t.Fatal(err)
	}
	for _, wch := range []clientv3.WatchChan{live, late} {
		if got := collect(t, wch, resp.Header.Revision); len(got) != 1 {
			t.Fatalf("after: %v", got)
		}
	}
}
