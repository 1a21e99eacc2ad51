package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/bench/etcddisk"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/internal/promscrape"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/execlog"
	"github.com/meshloc/meshloc/pkg/reminder"
)

// The lifecycle section's reminders part: two node children (the
// section's --sleep-after, an --exec-log each, each the primary of half
// the schedule's shards) on the section's etcd; p.Objects dcounters made
// through both, 64 in flight, each with one one-shot reminder ("remind r
// IN 0") due at a time spread uniformly over a window that opens once all
// are made: 60 s at 100,000 (the figure), the same rate at other
// sizes, at least 20 s. The second node is killed -9 halfway through the
// window and not restarted: the first fires its shards, as their backup
// until its lease expires, then as their primary. Once the schedule is
// empty (at most a minute after the window), both execution logs say which
// firings ran and when: each reminder exactly once (missing and run twice,
// % of the due firings: bound 0), and the lateness (execution start - due
// time) p99 beside the bound, 1 s.

const (
	lateBuckets       = 10
	lifecycleRemDue   = "lifecycle: reminder firings due"
	lifecycleRemBound = "lifecycle: reminder lateness bound"
)

// lifecycleReminders runs the part; rate, the section's first calls/s,
// sizes the time allowed to make the reminders.
func (x *run) lifecycleReminders(ctx context.Context, m *mesh, p LifecyclePlan, rate float64) error {
	n := p.Objects
	window := max(20*time.Second, time.Minute*time.Duration(n)/100_000)
	dir, err := os.MkdirTemp(x.dir, "lifecycle-reminders-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Names that split the schedule's shards 8/8 (r1 and r2 split them
	// 2/14), so that the node killed is the primary of half of them.
	names := [2]string{"r1", ""}
	for k := 2; names[1] == ""; k++ {
		c := 0
		for s := range reminder.Shards {
			if p, _ := reminder.Roles(s, []string{"r1", "r" + strconv.Itoa(k)}); p == "r1" {
				c++
			}
		}
		if c == reminder.Shards/2 {
			names[1] = "r" + strconv.Itoa(k)
		}
	}
	var nodes [2]*child
	var cls [2]*client.Client
	var web, logs [2]string
	for i, name := range names {
		logs[i] = filepath.Join(dir, name+".log")
		if web[i], err = freeport.Addr(); err != nil {
			return err
		}
		if nodes[i], cls[i], err = loneNode(ctx, m, name, web[i], x.lifeArgs("--sleep-after", p.SleepAfter.String(), "--exec-log", logs[i])...); err != nil {
			return err
		}
		defer nodes[i].kill()
		defer cls[i].Close()
	}
	// Three times what the section's first calls took, so that all are
	// made (and most asleep) before the first is due; a wrong guess fails
	// the part.
	start := time.Now().Add(10*time.Second + time.Duration(3*float64(n)/rate*float64(time.Second)))
	offs := rand.New(rand.NewPCG(1, 2)).Perm(n)
	due := make([]int64, n)
	x.step("lifecycle: making %d dcounters through %s and %s, a reminder each, due over %s from %s", n, names[0], names[1], window, start.Format(time.TimeOnly))
	err = inParallel(n, 64, func(i int) error {
		obj := "actor/dcounter/r" + strconv.Itoa(i)
		in := time.Until(start.Add(window * time.Duration(offs[i]) / time.Duration(n))).Milliseconds()
		if in < 0 {
			return fmt.Errorf("bench: lifecycle: making the reminders overran the window's start (%.0f first calls/s expected)", rate)
		}
		r, err := cls[i%2].Call(ctx, obj, "remind", "r", strconv.FormatInt(in, 10), "0")
		var d struct{ DueMs int64 }
		if err == nil {
			err = json.Unmarshal(r.Payload, &d)
		}
		due[i] = d.DueMs
		if err != nil {
			return fmt.Errorf("bench: lifecycle: remind %s: %w", obj, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	x.step("lifecycle: %d reminders set, %s before the first is due", n, time.Until(start).Round(time.Millisecond))
	maint, disk := m.etcd.Stats(), etcddisk.Read() // etcd while they are due, from here (maintained)
	if err := recSleep(ctx, time.Until(start.Add(window/2))); err != nil {
		return err
	}
	killMs := time.Now().UnixMilli()
	nodes[1].kill()
	x.step("lifecycle: %s killed -9 halfway; waiting for the schedule to empty", names[1])
	end := start.Add(window)
	if err := recSleep(ctx, time.Until(end)); err != nil {
		return err
	}
	done := m.etcd.Stats()
	maintained := fmt.Sprintf("etcd while they were due: %d compactions, %d defragmentations (the last blocked it %s), db %d MiB (%d MiB in use); %s",
		done.Compactions-maint.Compactions, done.Defrags-maint.Defrags, done.LastDefrag.Round(time.Millisecond), done.DBSize>>20, done.DBSizeInUse>>20,
		etcddisk.Read().Since(disk))
	var left int64 = -1
	for time.Since(end) < time.Minute && left != 0 {
		if r, err := m.ec.Get(ctx, keyspace.Default().RemindersPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
			left = r.Count
		}
		if err := recSleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}

	ran := map[string]int{}
	var late, lateAfter []time.Duration
	var byDue [lateBuckets][]time.Duration // by due time, a tenth of the window each
	torn, over := 0, 0
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l execlog.Line
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				torn++ // the killed node's last line, cut short
				continue
			}
			at := strings.LastIndexByte(l.Reminder, '@')
			if at < 0 {
				continue
			}
			d, _ := strconv.ParseInt(l.Reminder[at+1:], 10, 64)
			ran[l.Object]++
			late = append(late, time.Duration(l.T-d*int64(time.Millisecond)))
			if b := int((d - start.UnixMilli()) * lateBuckets / window.Milliseconds()); b >= 0 && b < lateBuckets {
				byDue[b] = append(byDue[b], late[len(late)-1])
			}
			if late[len(late)-1] > time.Second {
				over++
			}
			if d >= killMs {
				lateAfter = append(lateAfter, late[len(late)-1])
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("bench: lifecycle: %s: %w", path, err)
		}
	}
	var missing, twice, excused, dueAfter, ofKilled int
	for i := range n {
		obj := "actor/dcounter/r" + strconv.Itoa(i)
		switch c := ran[obj]; {
		case c > 1:
			twice++
		case c == 0 && firedInState(ctx, m, obj) == 1:
			excused++ // it ran and persisted; its line was torn by the kill
		case c == 0:
			missing++
		}
		if due[i] >= killMs {
			dueAfter++
		}
		if p, _ := reminder.Roles(reminder.ShardOf(obj), names[:]); p == names[1] {
			ofKilled++
		}
	}
	sends, _ := promscrape.SumBy(ctx, web[0], "meshloc_reminder_sends_total", "result")
	var sent []string
	for _, k := range slices.Sorted(maps.Keys(sends)) {
		sent = append(sent, fmt.Sprintf("%s %.0f", k, sends[k]))
	}
	pc := func(k int) float64 { return 100 * float64(k) / float64(n) }
	x.base(Measure{Name: lifecycleRemDue, Value: 100, Unit: "%", N: int64(n)})
	x.fig(Measure{Name: "lifecycle: reminder firings missing", Value: pc(missing), Unit: "%", N: int64(n),
		Note: fmt.Sprintf("%d of %d never ran (%d more ran with their log line torn by the kill: their state counts the firing); %d entries left in the schedule",
			missing, n, excused, left)}, lifecycleRemDue, le(0))
	x.fig(Measure{Name: "lifecycle: reminder firings run twice", Value: pc(twice), Unit: "%", N: int64(n),
		Note: fmt.Sprintf("%d of %d", twice, n)}, lifecycleRemDue, le(0))
	x.base(Measure{Name: lifecycleRemBound, Value: 1000, Unit: "ms", N: 1})
	x.fig(Measure{Name: fmt.Sprintf("lifecycle: reminder lateness p99, %d due over %s, a node killed -9 halfway", n, window.Round(time.Second)),
		Value: ms(pct(late, 99)), Unit: "ms", N: int64(len(late)),
		Note: fmt.Sprintf("execution start - due time; p50 %.0f ms, max %.0f ms, %d over 1 s; %d due after the kill (p99 %.0f ms); %s was the primary of %d by shard; %s's firings sent: %s; %s",
			ms(pct(late, 50)), ms(pct(late, 100)), over, dueAfter, ms(pct(lateAfter, 99)), names[1], ofKilled, names[0], strings.Join(sent, ", "), maintained)},
		lifecycleRemBound, le(1))
	var tenths []string
	for _, b := range byDue {
		tenths = append(tenths, fmt.Sprintf("%.0f", ms(pct(b, 99))))
	}
	x.step("lifecycle: reminders: %d missing, %d run twice, %d torn lines; lateness p50 %.0f ms, p99 %.0f ms, max %.0f ms; p99 by tenth of the window (ms): %s; %s",
		missing, twice, torn, ms(pct(late, 50)), ms(pct(late, 99)), ms(pct(late, 100)), strings.Join(tenths, " "), maintained)
	return nil
}

// firedInState is the firings object's persisted state counts (-1: it
// cannot be read).
func firedInState(ctx context.Context, m *mesh, object string) int64 {
	obj, err := keyspace.ParseObject(object)
	if err != nil {
		return -1
	}
	r, err := m.ec.Get(ctx, keyspace.Default().State(obj))
	var sv struct{ State []byte }
	var s struct{ Fired int64 }
	if err != nil || len(r.Kvs) != 1 || json.Unmarshal(r.Kvs[0].Value, &sv) != nil || json.Unmarshal(sv.State, &s) != nil {
		return -1
	}
	return s.Fired
}
