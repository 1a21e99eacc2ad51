package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/meshloc/meshloc/internal/verify/rotor"
)

// List is the list-append workload: streams append unique values and read.
// Checks: no duplicate (a double execution), no value never appended, every
// acknowledged append at the position its reply gave and present in every
// read of the same generation called after it returned, reads of one
// generation prefixes of each other, and in the final read every
// acknowledged append present (lost = 0) unless its generation was declared
// lost.
type List struct {
	Prefix string
	N      int
	Think  time.Duration
	// Rotate moves each of the N slots on to a fresh object after that many
	// acknowledged appends (0: never), so that reads stay small in long
	// runs (see rotor).
	Rotate int
	// Type is the object type (default "list"); "dlist" runs the workload on
	// the durable variant (pkg/actor/builtin DurableTypes), whose objects
	// survive a crash of their owner: then no StateLost is declared and
	// every acknowledged write must be in the final read. The workload is
	// named after its type, so both variants can run side by side.
	Type string
	// Groups > 0 puts the lists into that many groups at setup (the
	// cluster must be a GroupMaker; groups.go): the storm then moves whole
	// groups.
	Groups int

	rot rotor.Lazy
}

// NewList returns the workload on n objects.
func NewList(prefix string, n int) *List { return &List{Prefix: prefix, N: n} }

// Name implements Workload.
func (w *List) Name() string { return w.typ() }

func (w *List) typ() string { return typeOr(w.Type, "list") }

// Objects implements Workload.
func (w *List) Objects() []string { return w.names().Objects() }

func (w *List) names() *rotor.Rotor { return w.rot.Get(w.typ(), w.Prefix+"l", w.N, w.Rotate) }

// FinalRead implements Workload.
func (w *List) FinalRead() (string, []string) { return "read", nil }

// Run implements Workload.
func (w *List) Run(ctx context.Context, s Stream, h *History) {
	rng := newRand(s.ID)
	rot := w.names()
	var mustRead string
	seq := 0
	for ctx.Err() == nil {
		slot := rng.IntN(w.N)
		obj := rot.Current(slot)
		var op Op
		if mustRead != "" || rng.IntN(10) < 2 {
			if mustRead != "" {
				obj = mustRead
			}
			op = Invoke(ctx, s, h, w.Name(), obj, "read")
			if op.Outcome == OK {
				mustRead = ""
			}
		} else {
			seq++
			op = Invoke(ctx, s, h, w.Name(), obj, "append", fmt.Sprintf("c%d-%d", s.ID, seq))
			if op.Outcome == OK {
				rot.Wrote(slot, obj)
			}
		}
		if op.Outcome == Unknown {
			mustRead = obj
		}
		pause(ctx, w.Think)
	}
}

type listReadReply struct {
	Items []string `json:"items"`
}

type listAppendReply struct {
	Length int `json:"length"`
}

// seqRead is a successful read of a sequence (list items, bank ledger).
type seqRead struct {
	op    Op
	items []string
}

// checkSequence checks reads of an append-only sequence of unique values
// against the appends (value → its operation): duplicates, values never
// appended or appended with a definite failure, acknowledged appends
// missing from later reads of the same generation, and prefix order.
// position gives the index an acknowledged append's reply claims (-1: none).
func checkSequence(res *Result, obj string, reads []seqRead, appends map[string]Op, position func(Op) int, what string) {
	dups, unexpected, misplaced := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, rd := range reads {
		seen := map[string]int{}
		for i, v := range rd.items {
			if j, dup := seen[v]; dup {
				if !dups[v] {
					dups[v] = true
					res.Duplicated++
					res.violate("duplicated", obj, fmt.Sprintf("%s %q at positions %d and %d of one read: executed twice", what, v, j, i), appends[v], rd.op)
				}
				continue
			}
			seen[v] = i
			a, ok := appends[v]
			// StateLost: not executed under the new generation; the owner
			// that died may have executed it under an older one.
			refused := a.Outcome == Fail && !(a.StateLost() && rd.op.Fence.ObjectGeneration < a.Fence.ObjectGeneration)
			if (!ok || refused) && !unexpected[v] {
				unexpected[v] = true
				res.Unexpected++
				if !ok {
					res.violate("unexpected", obj, fmt.Sprintf("%s %q in a read was never attempted", what, v), rd.op)
				} else {
					res.violate("unexpected", obj, fmt.Sprintf("%s %q in a read was answered %s (not executed)", what, v, a.Code), a, rd.op)
				}
			}
		}
		var missing []Op
		for v, a := range appends {
			if a.Outcome != OK || a.Fence.ObjectGeneration != rd.op.Fence.ObjectGeneration {
				continue
			}
			i, present := seen[v]
			if !present {
				if a.Return < rd.op.Call && !rd.op.Final {
					missing = append(missing, a)
				}
				continue
			}
			if p := position(a); p >= 0 && p != i && !misplaced[v] {
				misplaced[v] = true
				res.violate("order", obj, fmt.Sprintf("%s %q acknowledged at position %d, read at %d", what, v, p, i), a, rd.op)
			}
		}
		if len(missing) > 0 {
			res.StaleReads++
			sort.Slice(missing, func(i, j int) bool { return missing[i].Return < missing[j].Return })
			res.violate("stale-read", obj, fmt.Sprintf("%d %ss acknowledged before a read of the same generation was called are missing from it, first %q",
				len(missing), what, missing[0].Input[len(missing[0].Input)-1]), missing[0], rd.op)
		}
	}
	// Reads of one generation are prefixes of each other, and one called
	// after another returned is not shorter.
	gens := map[int64][]seqRead{}
	for _, rd := range reads {
		gens[rd.op.Fence.ObjectGeneration] = append(gens[rd.op.Fence.ObjectGeneration], rd)
	}
	for _, rs := range gens {
		sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].items) < len(rs[j].items) })
		for i := 1; i < len(rs); i++ {
			a, b := rs[i-1], rs[i]
			if !slices.Equal(a.items, b.items[:len(a.items)]) {
				res.violate("prefix", obj, fmt.Sprintf("a read of %d %ss is not a prefix of a read of %d", len(a.items), what, len(b.items)), a.op, b.op)
			}
			if b.op.Return < a.op.Call && len(b.items) < len(a.items) {
				res.StaleReads++
				res.violate("stale-read", obj, fmt.Sprintf("a read of %d %ss returned before a read of %d was called", len(b.items), what, len(a.items)), b.op, a.op)
			}
		}
	}
}

// Check implements Workload.
func (w *List) Check(h *History, final FinalState) Result {
	res := Result{Workload: w.Name()}
	ops := opsOf(h, w.Name())
	res.count(ops)
	losses := DeclaredLosses(ops)
	for obj, oops := range byObject(ops) {
		appends := map[string]Op{}
		var reads []seqRead
		for _, o := range oops {
			switch {
			case o.Kind == "append" && len(o.Input) == 1:
				appends[o.Input[0]] = o
				if o.Outcome == OK {
					res.Acked++
				}
			case o.Kind == "read" && o.Outcome == OK:
				var r listReadReply
				if err := json.Unmarshal(o.Output, &r); err != nil {
					res.violate("reply", obj, "read reply: "+err.Error(), o)
					continue
				}
				reads = append(reads, seqRead{op: o, items: r.Items})
			}
		}
		checkSequence(&res, obj, reads, appends, func(a Op) int {
			var r listAppendReply
			if json.Unmarshal(a.Output, &r) != nil || r.Length <= 0 {
				return -1
			}
			return r.Length - 1
		}, "value")
		fin, ok := final.Reads[obj]
		if !ok {
			continue
		}
		var items listReadReply
		_ = json.Unmarshal(fin.Output, &items)
		present := map[string]bool{}
		for _, v := range items.Items {
			present[v] = true
		}
		res.accountAll(obj, "append", appends, present, fin, losses[obj])
		res.figure("final-items", int64(len(items.Items)))
	}
	res.finish()
	return res
}
