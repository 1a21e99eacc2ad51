package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/internal/verify/remindcheck"
)

// Counter is the counter workload: streams add 1 and read. Every value a
// reply shows (a read, or an add's result) lies between the acknowledged
// adds of its generation that returned before it was called and the adds
// (acknowledged in its generation, or of unknown outcome) called before it
// returned; the final value between Σ acknowledged and Σ attempted adds.
// Below is lost (or stale), above is duplicated.
//
// As the lifecycle workload (Label "lifecycle", Type "dcounter", Idle set,
// nodes with a short --sleep-after) its streams leave objects idle long
// enough to sleep, so the same bounds check that a sleep and a wake lose
// and repeat nothing: no acknowledged add missing after a wake, none
// executed twice by a retry answered across it.
type Counter struct {
	Prefix string
	N      int
	Think  time.Duration
	// Label names the workload ("" : "counter"); Type is the object type
	// ("" : "counter").
	Label, Type string
	// Idle, when set, is a pause a stream takes after about one operation
	// in four: longer than the nodes' --sleep-after, its objects sleep.
	Idle time.Duration
	// Durable: the type persists every acknowledged change, so a new
	// object generation (a recovery) continues the count: the bounds are
	// taken over every generation, and every acknowledged add must be in
	// the final value.
	Durable bool
	// Groups > 0 puts the counters into that many groups at setup (the
	// cluster must be a GroupMaker; groups.go): the storm then moves whole
	// groups.
	Groups int
	// Deletes: about one operation in 40 is a delete (the counter ends
	// itself: actor.Context.Delete). Each acknowledged delete of
	// generation D starts the count again at 0 (counter_delete.go): the
	// bounds of a value read under generation g take only the adds of
	// generations after the last delete before g, and no reply of a
	// generation up to D may come after the delete returned.
	Deletes bool
	// Reminders: about one operation in 8 sets a reminder (dcounter's
	// remind): a one-shot of its own name, due in 0.1-1.5 s, or (one in
	// two) the object's periodic one ("p", every second) again. Every one-shot
	// acknowledged must run once (unless its object was deleted), and no
	// due time of any may run twice (the execution logs:
	// internal/verify/remindcheck).
	Reminders bool
}

// NewCounter returns the workload on n objects.
func NewCounter(prefix string, n int) *Counter { return &Counter{Prefix: prefix, N: n} }

// Name implements Workload.
func (w *Counter) Name() string { return typeOr(w.Label, "counter") }

// Objects implements Workload.
func (w *Counter) Objects() []string {
	prefix := w.Prefix + "k"
	if w.Label != "" {
		prefix = w.Prefix + w.Label[:1]
	}
	return objectNames(typeOr(w.Type, "counter"), prefix, w.N)
}

// FinalRead implements Workload.
func (w *Counter) FinalRead() (string, []string) { return "get", nil }

// Run implements Workload.
func (w *Counter) Run(ctx context.Context, s Stream, h *History) {
	rng := newRand(s.ID)
	objs := w.Objects()
	var mustRead string
	for ctx.Err() == nil {
		obj := pick(rng, objs)
		var op Op
		if mustRead != "" || rng.IntN(10) < 2 {
			if mustRead != "" {
				obj = mustRead
			}
			op = Invoke(ctx, s, h, w.Name(), obj, "get")
			if op.Outcome == OK {
				mustRead = ""
			}
		} else if w.Reminders && rng.IntN(8) == 0 {
			name, period := fmt.Sprintf("o%d-%d", s.ID, rng.Uint64()), "0"
			if rng.IntN(2) == 0 {
				name, period = "p", "1000"
			}
			op = Invoke(ctx, s, h, w.Name(), obj, "remind", name, strconv.Itoa(100+rng.IntN(1400)), period)
		} else if w.Deletes && rng.IntN(40) == 0 {
			op = Invoke(ctx, s, h, w.Name(), obj, "delete")
		} else {
			op = Invoke(ctx, s, h, w.Name(), obj, "add", "1")
		}
		if op.Outcome == Unknown {
			mustRead = obj
		}
		if w.Idle > 0 && rng.IntN(4) == 0 {
			pause(ctx, w.Idle)
			continue
		}
		pause(ctx, w.Think)
	}
}

type counterReply struct {
	Value *int64 `json:"value"`
}

// Check implements Workload.
func (w *Counter) Check(h *History, final FinalState) Result {
	res := Result{Workload: w.Name()}
	ops := opsOf(h, w.Name())
	res.count(ops)
	losses := DeclaredLosses(ops)
	per := byObject(ops)
	objs := make([]string, 0, len(per))
	for o := range per {
		objs = append(objs, o)
	}
	sort.Strings(objs)
	for _, obj := range objs {
		oops := per[obj]
		var adds, unknown, lost []Op
		type obs struct {
			op Op
			v  int64
		}
		var seen []obs
		dels := deletesOf(oops)
		for _, o := range oops {
			if o.Kind == "add" {
				switch o.Outcome {
				case OK:
					adds = append(adds, o)
					res.Acked++
				case Unknown:
					unknown = append(unknown, o)
				case Fail:
					if o.StateLost() {
						lost = append(lost, o)
					}
				}
			}
			if o.Outcome == OK {
				var r counterReply
				if err := json.Unmarshal(o.Output, &r); err != nil || r.Value == nil {
					res.violate("reply", obj, fmt.Sprintf("reply %q", o.Output), o)
					continue
				}
				seen = append(seen, obs{o, *r.Value})
			}
		}
		for _, s := range seen {
			g := s.op.Fence.ObjectGeneration
			if d, back := dels.cameBack(s.op); back {
				res.violate("deleted-state-back", obj, fmt.Sprintf("a reply under generation %d after the delete of generation %d returned", g, d.Fence.ObjectGeneration), d, s.op)
			}
			epoch, sameOnly := dels.epoch(g, s.op.Return)
			var lower, upper int64
			for _, a := range adds {
				ag := a.Fence.ObjectGeneration
				if ag <= epoch {
					continue // deleted before s's object was made
				}
				// A memory type counts only its own generation; a durable
				// one every later generation too, unless a delete of
				// unknown outcome may lie between (the lower bound must be
				// certain, the upper one may be generous).
				inLower := ag == g || w.Durable && !sameOnly
				inUpper := ag == g || w.Durable
				if inLower && (a.Return < s.op.Call || a.ID == s.op.ID) {
					lower++
				}
				if inUpper && a.Call < s.op.Return {
					upper++
				}
			}
			for _, u := range unknown {
				if u.Call < s.op.Return {
					upper++
				}
			}
			for _, l := range lost { // may have run on the owner that died
				if l.Call < s.op.Return && l.Fence.ObjectGeneration > g {
					upper++
				}
			}
			switch {
			case s.v < lower:
				if s.op.Final {
					continue // counted below as lost
				}
				res.StaleReads++
				res.violate("counter-bounds", obj, fmt.Sprintf("value %d below the %d adds acknowledged before it was called", s.v, lower), s.op)
			case s.v > upper:
				res.Duplicated += int(s.v - upper)
				res.violate("counter-bounds", obj, fmt.Sprintf("value %d above the %d adds attempted before it returned: executed twice", s.v, upper), s.op)
			}
		}
		fin, ok := final.Reads[obj]
		if !ok {
			continue
		}
		var r counterReply
		_ = json.Unmarshal(fin.Output, &r)
		if r.Value == nil {
			continue
		}
		var lower int64
		var lastAcked Op
		fg := fin.Fence.ObjectGeneration
		epoch, sameOnly := dels.epoch(fg, fin.Return)
		for _, a := range adds {
			if ag := a.Fence.ObjectGeneration; ag <= epoch || sameOnly && ag != fg {
				continue // deleted since (or maybe, by a delete of unknown outcome)
			}
			f := mustBePresent
			if !w.Durable {
				f = writeFate(a.Fence.ObjectGeneration, fin.Fence.ObjectGeneration, losses[obj])
			}
			switch f {
			case mustBePresent:
				lower++
				lastAcked = a
			default:
				res.account(f, false, obj, "add 1", a, fin)
			}
		}
		if *r.Value < lower {
			res.Lost += int(lower - *r.Value)
			res.SilentLost += int(lower - *r.Value)
			res.violate("lost", obj, fmt.Sprintf("final value %d, below the %d adds acknowledged (in its generation, for a memory type)", *r.Value, lower), lastAcked, fin)
		}
		res.figure("final-sum", *r.Value)
	}
	if w.Reminders && final.Exec != nil {
		rc := remindcheck.Check(final.Exec)
		expectReminders(&rc, h, ops)
		for _, v := range rc.NotRun {
			res.violate("reminder-not-fired", "", v)
		}
		res.figure("reminder-firings", int64(rc.Firings))
	}
	res.finish()
	return res
}

// Settle lets the reminders the run set come due before the final reads.
func (w *Counter) Settle(ctx context.Context, _ Stream, _ *History) error {
	if w.Reminders {
		pause(ctx, 4*time.Second)
	}
	return nil
}
