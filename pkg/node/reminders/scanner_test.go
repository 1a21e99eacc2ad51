package reminders

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/reminder"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStore is the schedule in memory (the real one is pkg/authority's,
// tested against etcd there and in pkg/node).
type memStore struct {
	mu  sync.Mutex
	rev int64
	kv  map[string]reminder.Due // key → entry (Rev: its revision)
}

func (m *memStore) put(shard int, dueMs int64, e reminder.Entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev++
	k := keyOf(shard, dueMs, e)
	m.kv[k] = reminder.Due{Key: k, Rev: m.rev, Shard: shard, DueMs: dueMs, Entry: e}
}

func keyOf(shard int, dueMs int64, e reminder.Entry) string {
	return string(rune('a'+shard)) + "/" + time.UnixMilli(dueMs).UTC().Format(time.RFC3339Nano) + "/" + reminder.ID(e.Object, e.Name, e.Seq)
}

func (m *memStore) DueReminders(_ context.Context, qs []reminder.Query) ([]reminder.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]reminder.Result, len(qs))
	for i, q := range qs {
		for _, d := range m.kv {
			if d.Shard == q.Shard && d.DueMs >= q.FromMs && d.DueMs <= q.ThroughMs && len(out[i].Due) < q.Limit {
				out[i].Due = append(out[i].Due, d)
			}
		}
		slices.SortFunc(out[i].Due, func(a, b reminder.Due) int { return cmp.Compare(a.DueMs, b.DueMs) })
	}
	return out, nil
}

func (m *memStore) AdvanceReminder(_ context.Context, d reminder.Due, next *reminder.Scheduled) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.kv[d.Key]; !ok || cur.Rev != d.Rev {
		return false, nil
	}
	delete(m.kv, d.Key)
	if next != nil {
		e, err := reminder.DecodeEntry(next.Value)
		if err != nil {
			panic(err)
		}
		m.rev++
		k := keyOf(next.Shard, next.DueMs, e)
		m.kv[k] = reminder.Due{Key: k, Rev: m.rev, Shard: next.Shard, DueMs: next.DueMs, Entry: e}
	}
	return true, nil
}

// persistedLeft is persisted by a store that put the next entry but did
// not remove the fired one (a store beside etcd whose removal failed).
func (m *memStore) persistedLeft(d reminder.Due) {
	if n, ok := d.Next(); ok {
		e, err := reminder.DecodeEntry(n.Value)
		if err != nil {
			panic(err)
		}
		m.put(n.Shard, n.DueMs, e)
	}
}

// persisted is the owner's persist of d's firing: the entry removed and
// the next one put, whatever its revision (reminder.After).
func (m *memStore) persisted(d reminder.Due) {
	m.mu.Lock()
	delete(m.kv, d.Key)
	m.mu.Unlock()
	if n, ok := d.Next(); ok {
		e, err := reminder.DecodeEntry(n.Value)
		if err != nil {
			panic(err)
		}
		m.put(n.Shard, n.DueMs, e)
	}
}

func (m *memStore) RebaseReminder(_ context.Context, d reminder.Due, atMs int64) (reminder.Due, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.kv[d.Key]; !ok || cur.Rev != d.Rev {
		return d, false, nil
	}
	m.rev++
	d.Entry.AtMs, d.Rev = atMs, m.rev
	m.kv[d.Key] = d
	return d, true, nil
}

// TestScanner: a primary and a backup fire one store: a periodic entry
// advances once per due time (by the firing's persist), an undecided
// firing is sent again under its first attempt's number, a gone one is
// removed, an expired one re-based (once its owner says so, never before),
// one whose change is too large to
// persist removed by the scanner, and one its persist left behind removed
// once a send of it is answered by a replay.
func TestScanner(t *testing.T) {
	st := &memStore{kv: map[string]reminder.Due{}}
	now := time.Now().UnixMilli()
	periodic := reminder.Entry{Object: "actor/dcounter/p", Name: "p", Seq: 1, Generation: 1, PeriodMs: 1000}
	flaky := reminder.Entry{Object: "actor/dcounter/f", Name: "f", Seq: 1, Generation: 1}
	gone := reminder.Entry{Object: "actor/dcounter/g", Name: "g", Seq: 1, Generation: 1}
	old := reminder.Entry{Object: "actor/dcounter/o", Name: "o", Seq: 1, Generation: 1}
	big := reminder.Entry{Object: "actor/dcounter/b", Name: "b", Seq: 1, Generation: 1}
	left := reminder.Entry{Object: "actor/dcounter/l", Name: "l", Seq: 1, Generation: 1}
	st.put(reminder.ShardOf(left.Object), now, left)
	st.put(reminder.ShardOf(big.Object), now, big)
	st.put(reminder.ShardOf(periodic.Object), now-2500, periodic)
	st.put(reminder.ShardOf(flaky.Object), now, flaky)
	st.put(reminder.ShardOf(gone.Object), now, gone)
	st.put(reminder.ShardOf(old.Object), now-time.Minute.Milliseconds(), old)

	var mu sync.Mutex
	fired := map[string]int{} // object@due → firings that ran
	attempts := map[string]int{}
	fire := func(_ context.Context, d reminder.Due, attempt int) *pb.CallReply {
		mu.Lock()
		defer mu.Unlock()
		k := d.Entry.Object + "@" + time.UnixMilli(d.DueMs).String()
		attempts[d.Entry.Object]++
		switch d.Entry.Object {
		case flaky.Object:
			if attempt == 0 {
				return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE}
			}
		case gone.Object:
			return &pb.CallReply{Code: pb.Code_CODE_NOT_FOUND}
		case big.Object:
			return &pb.CallReply{Code: pb.Code_CODE_STATE_TOO_LARGE}
		case old.Object:
			// Sent under its due time's id (an earlier attempt may still
			// run under it), re-based only once its owner says the id left
			// the window.
			if d.Entry.AtMs == 0 {
				return &pb.CallReply{Code: pb.Code_CODE_OPERATION_EXPIRED}
			}
		}
		if fired[k] > 0 {
			return &pb.CallReply{Code: pb.Code_CODE_OK, Replayed: true} // the de-duplication table answers
		}
		fired[k]++
		if d.Entry.Object == left.Object {
			st.persistedLeft(d)
		} else {
			st.persisted(d)
		}
		return &pb.CallReply{Code: pb.Code_CODE_OK}
	}
	sends := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s"}, []string{"result"})
	cfg := Config{Tick: 10 * time.Millisecond, Grace: 30 * time.Millisecond, InFlight: 8, Batch: 16, MaxBackoff: 50 * time.Millisecond, FireTimeout: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, self := range []string{"n1", "n2"} {
		s := New(cfg, Deps{Clock: clock.Real(), Store: st, Self: self, Nodes: func() []string { return []string{"n1", "n2"} },
			Fire: fire, Sends: sends, Log: zerolog.Nop()})
		wg.Go(func() { s.Run(ctx) })
	}
	// Once the scans start past it, an entry put behind them (a reminder
	// set due a second ago): a read from the shard's start finds it.
	time.Sleep(100 * time.Millisecond)
	behind := reminder.Entry{Object: "actor/dcounter/h", Name: "h", Seq: 1, Generation: 1}
	behindDue := time.Now().Add(-time.Second).UnixMilli()
	st.put(reminder.ShardOf(behind.Object), behindDue, behind)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := fired[flaky.Object+"@"+time.UnixMilli(now).String()] * fired[behind.Object+"@"+time.UnixMilli(behindDue).String()] * attempts[left.Object]
		p := 0
		for k, v := range fired {
			if len(k) > len(periodic.Object) && k[:len(periodic.Object)] == periodic.Object {
				p += v
			}
		}
		mu.Unlock()
		if n >= 2 && p >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	p := 0
	for k := range fired {
		if len(k) > len(periodic.Object) && k[:len(periodic.Object)] == periodic.Object {
			p++
		}
	}
	if p < 3 { // due 2.5 s ago every second: three due times already
		t.Errorf("the periodic entry fired %d due times", p)
	}
	if fired[behind.Object+"@"+time.UnixMilli(behindDue).String()] != 1 {
		t.Error("an entry put behind where the scans start never fired")
	}
	if attempts[flaky.Object] < 2 {
		t.Errorf("the flaky firing was sent %d times", attempts[flaky.Object])
	}
	for k, v := range fired {
		if v != 1 {
			t.Errorf("%s ran %d times", k, v)
		}
	}
	for _, d := range st.kv {
		if d.Entry.Object != periodic.Object {
			t.Errorf("entry %s of %s left", d.Key, d.Entry.Object)
		}
	}
}

// TestBackupFiresADeadPrimarysShards: of two nodes, one never scans (dead,
// its lease not ended yet): the other, backup of its shards, sees no
// entry of them decided and fires them too.
func TestBackupFiresADeadPrimarysShards(t *testing.T) {
	st := &memStore{kv: map[string]reminder.Due{}}
	now := time.Now().UnixMilli()
	want := map[string]bool{}
	for i := 0; len(want) < 2*reminder.Shards; i++ {
		e := reminder.Entry{Object: "actor/dcounter/d" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Name: "r", Seq: 1, Generation: 1}
		st.put(reminder.ShardOf(e.Object), now, e)
		want[e.Object] = true
	}
	var mu sync.Mutex
	fired := map[string]bool{}
	fire := func(_ context.Context, d reminder.Due, _ int) *pb.CallReply {
		mu.Lock()
		fired[d.Entry.Object] = true
		mu.Unlock()
		st.persisted(d)
		return &pb.CallReply{Code: pb.Code_CODE_OK}
	}
	cfg := Config{Tick: 10 * time.Millisecond, Grace: 30 * time.Millisecond, InFlight: 8, Batch: 16, MaxBackoff: 50 * time.Millisecond, FireTimeout: time.Second}
	s := New(cfg, Deps{Clock: clock.Real(), Store: st, Self: "n1", Nodes: func() []string { return []string{"n1", "n2"} },
		Fire: fire, Sends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s"}, []string{"result"}), Log: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(fired)
		mu.Unlock()
		if n == len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if len(fired) != len(want) {
		t.Fatalf("fired %d of %d entries with the primary of about half of them dead", len(fired), len(want))
	}
}

// TestFiringsWaitingOnALeftNodeGoAgain: a firing answered UNAVAILABLE
// waits before it is sent again, longer at each attempt; once a node
// leaves (its lease ended: the objects it owned may be recovered now),
// the next scan sends it again at once.
func TestFiringsWaitingOnALeftNodeGoAgain(t *testing.T) {
	st := &memStore{kv: map[string]reminder.Due{}}
	var e reminder.Entry
	for i := 0; e.Object == ""; i++ {
		obj := "actor/dcounter/w" + string(rune('a'+i))
		if p, _ := reminder.Roles(reminder.ShardOf(obj), []string{"n1", "n2"}); p == "n1" {
			e = reminder.Entry{Object: obj, Name: "r", Seq: 1, Generation: 1}
		}
	}
	st.put(reminder.ShardOf(e.Object), time.Now().Add(-time.Second).UnixMilli(), e)
	sent := 0
	fire := func(context.Context, reminder.Due, int) *pb.CallReply {
		sent++ // one at a time: each scan below waits for its firings
		return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE}
	}
	nodes := []string{"n1", "n2"}
	// A tick of an hour: the backoff after the first attempt is an hour.
	cfg := Config{Tick: time.Hour, Grace: time.Hour, InFlight: 8, Batch: 16, MaxBackoff: 2 * time.Hour, FireTimeout: time.Second}
	s := New(cfg, Deps{Clock: clock.Real(), Store: st, Self: "n1", Nodes: func() []string { return nodes },
		Fire: fire, Sends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s"}, []string{"result"}), Log: zerolog.Nop()})
	scan := func() int {
		s.scan(context.Background())
		s.wg.Wait()
		return sent
	}
	if n := scan(); n != 1 {
		t.Fatalf("first scan sent %d firings, want 1", n)
	}
	if n := scan(); n != 1 {
		t.Fatalf("a firing waiting its backoff was sent again (%d sends)", n)
	}
	nodes = []string{"n1"}
	if n := scan(); n != 2 {
		t.Fatalf("after n2 left, %d sends, want the waiting firing sent again", n)
	}
	if n := scan(); n != 2 {
		t.Fatalf("sent again without a node leaving (%d sends)", n)
	}
}
