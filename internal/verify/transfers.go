package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/wire"
)

// Transfers is the transfers workload: chains of transfers by message
// between bank objects (the durable dbank by default: their state and
// their outboxes survive a crash of their owner). A chain is one call,
// `chain TXID 1 B1 B2 …` on its origin bank A, which gives 1 from its
// account a0 and asks B1 to hop it on (A sends to B1, B1 sends to B2, …;
// the last keeps it); each sender's OnReply records the answer
// (pkg/actor/builtin bank_messages.go).
//
// After heal it waits until every bank has the answer of every message it
// sent (Settle), then checks:
//
//   - the money is conserved: the banks' totals sum to N × 800;
//   - every chain that started (its call acknowledged, or found in its
//     origin's ledger) executed each hop exactly once — each bank on it
//     lists it once among its hops (message-lost, message-duplicated) —
//     and each sender took each answer exactly once (reply-lost,
//     reply-duplicated); no answer was a refusal (message-refused: the
//     run's faults end well within the de-duplication window);
//   - a chain that did not start left no hop anywhere (unexpected);
//   - against the nodes' execution logs: every message execution logged
//     with a sender of this workload has the operation id its sender must
//     derive (actor.MessageID of the turn that sent it: message-id-not-derived),
//     ran on the object it was sent to (message-misrouted), and none ran
//     twice (message-executed-twice; so does each OnReply turn). A hop in
//     a bank's state without a log line is counted (unlogged), not a
//     violation: a node killed between its durable write and its log line
//     wrote the one and not the other, and the retry was answered from the
//     persisted reply.
type Transfers struct {
	Prefix string
	// N banks (default 12); Chains started at most in the run (default
	// 200, shared by the streams); MaxHops per chain (default 4: 1 to 4).
	N, Chains, MaxHops int
	Think              time.Duration
	// Pace is the wait between two chains of one stream (0: Think): spread
	// the chains over the run.
	Pace time.Duration
	// Type of the banks (default "dbank").
	Type string

	started atomic.Int64
}

// Name implements Workload.
func (w *Transfers) Name() string { return "transfers" }

func (w *Transfers) n() int {
	if w.N <= 0 {
		return 12
	}
	return w.N
}

// Objects implements Workload.
func (w *Transfers) Objects() []string {
	return objectNames(typeOr(w.Type, "dbank"), w.Prefix+"x", w.n())
}

// FinalRead implements Workload.
func (w *Transfers) FinalRead() (string, []string) { return "read", nil }

// Run implements Workload: chains while they last, then reads.
func (w *Transfers) Run(ctx context.Context, s Stream, h *History) {
	rng := newRand(s.ID)
	objs := w.Objects()
	chains, hops := w.Chains, w.MaxHops
	if chains <= 0 {
		chains = 200
	}
	if hops <= 0 {
		hops = 4
	}
	hops = min(hops, len(objs)-1)
	for seq := 1; ctx.Err() == nil; seq++ {
		if w.started.Add(1) > int64(chains) {
			Invoke(ctx, s, h, w.Name(), pick(rng, objs), "read")
			pause(ctx, 10*w.Think+50*time.Millisecond)
			continue
		}
		perm := rng.Perm(len(objs))[:2+rng.IntN(hops)]
		args := []string{fmt.Sprintf("x%d-%d", s.ID, seq), "1"}
		for _, p := range perm[1:] {
			args = append(args, objs[p])
		}
		// An unknown outcome is retried with the same operation id: the
		// chain then has one id, from which every message id derives.
		op := wire.NewOperationID()
		for attempt := 0; attempt < 5; attempt++ {
			if o := invokeOp(ctx, s, h, false, op, w.Name(), objs[perm[0]], "chain", args...); o.Outcome != Unknown || ctx.Err() != nil {
				break
			}
			pause(ctx, 200*time.Millisecond)
		}
		pause(ctx, max(w.Pace, w.Think))
	}
}

// bankFinal is what a transfers check reads of a bank.
type bankFinal struct {
	Ledger   []string `json:"ledger"`
	Total    int64    `json:"total"`
	Sent     int64    `json:"sent"`
	Received int64    `json:"received"`
	Hops     []string `json:"hops"`
	Acks     []string `json:"acks"`
}

// Settle implements Settler: it reads every bank until each has taken the
// answer of every message it sent (each carries 1, so a bank's sent is its
// count of messages), or nothing changed for 5 s, or ctx ends.
func (w *Transfers) Settle(ctx context.Context, s Stream, h *History) error {
	objs := w.Objects()
	last, quiet := -1, time.Now()
	for {
		pending, answered := 0, 0
		for _, o := range objs {
			op := Invoke(ctx, s, h, w.Name(), o, "read")
			var b bankFinal
			if op.Outcome != OK || json.Unmarshal(op.Output, &b) != nil {
				pending++ // not readable now: try again
				continue
			}
			answered += len(b.Acks)
			pending += int(b.Sent) - len(b.Acks)
		}
		if pending == 0 {
			return nil
		}
		if answered != last {
			last, quiet = answered, time.Now()
		}
		if time.Since(quiet) > 5*time.Second || ctx.Err() != nil {
			return fmt.Errorf("not settled: %d messages without an answer (no progress for %s)", pending, time.Since(quiet).Round(time.Second))
		}
		pause(ctx, 250*time.Millisecond)
	}
}

// chainOf is one chain of a run: its call's attempts (one operation id).
type chainOf struct {
	txid    string
	op      string
	path    []string // origin, then the hops
	acked   bool
	unknown bool
}

// Check implements Workload.
func (w *Transfers) Check(h *History, final FinalState) Result {
	res := Result{Workload: w.Name()}
	ops := opsOf(h, w.Name())
	res.count(ops)
	chains := map[string]*chainOf{}
	for _, o := range ops {
		if o.Kind != "chain" || len(o.Input) < 3 {
			continue
		}
		c := chains[o.Input[0]]
		if c == nil {
			c = &chainOf{txid: o.Input[0], op: o.OpID, path: append([]string{o.Object}, o.Input[2:]...)}
			chains[c.txid] = c
		}
		switch o.Outcome {
		case OK:
			c.acked = true
			res.Acked++
		case Unknown:
			c.unknown = true
		}
	}
	banks := map[string]bankFinal{}
	var total int64
	for _, obj := range w.Objects() {
		f, ok := final.Reads[obj]
		if !ok {
			continue
		}
		var b bankFinal
		if err := json.Unmarshal(f.Output, &b); err != nil {
			res.violate("reply", obj, "final read: "+err.Error(), f)
			continue
		}
		banks[obj] = b
		total += b.Total
	}
	if len(banks) == len(w.Objects()) {
		if want := int64(len(banks)) * bankTotal; total != want {
			res.violate("transfers-total", "", fmt.Sprintf("the banks' totals sum to %d, want %d: money appeared or vanished in transit", total, want))
		}
	}
	txids := make([]string, 0, len(chains))
	for id := range chains {
		txids = append(txids, id)
	}
	sort.Strings(txids)
	expected := map[string]string{} // derived operation id → the object it must run on
	replies := map[string]string{}
	started := 0
	for _, id := range txids {
		c := chains[id]
		origin, seen := banks[c.path[0]]
		inLedger := seen && countOf(origin.Ledger, id) > 0
		switch {
		case c.acked && seen && !inLedger:
			res.Lost++
			res.violate("lost", c.path[0], fmt.Sprintf("chain %s acknowledged, not in its origin's ledger", id))
			continue
		case !c.acked && !inLedger:
			for _, b := range c.path[1:] {
				if n := countOf(banks[b].Hops, id); n > 0 {
					res.Unexpected++
					res.violate("unexpected", b, fmt.Sprintf("chain %s did not start, yet %s executed its hop %d times", id, b, n))
				}
			}
			continue
		}
		started++
		parent, err := wire.ParseOperationID(c.op)
		for k := 1; k < len(c.path); k++ {
			to, from := c.path[k], c.path[k-1]
			if err == nil {
				parent = actor.MessageID(parent, 0)
				expected[parent.String()] = to
				replies[actor.ReplyOperationID(parent).String()] = from
			}
			if b, ok := banks[to]; ok {
				switch n := countOf(b.Hops, id); {
				case n == 0:
					res.Lost++
					res.violate("message-lost", to, fmt.Sprintf("chain %s: the hop from %s never ran here", id, from))
				case n > 1:
					res.Duplicated++
					res.violate("message-duplicated", to, fmt.Sprintf("chain %s: the hop from %s ran %d times", id, from, n))
				}
			}
			if b, ok := banks[from]; ok {
				n, refused := acksOf(b.Acks, id)
				switch {
				case n == 0:
					res.violate("reply-lost", from, fmt.Sprintf("chain %s: the answer of the hop to %s never reached OnReply", id, to))
				case n > 1:
					res.Duplicated++
					res.violate("reply-duplicated", from, fmt.Sprintf("chain %s: OnReply took the answer of the hop to %s %d times", id, to, n))
				}
				if refused != "" {
					res.violate("message-refused", from, fmt.Sprintf("chain %s: the hop to %s was answered %s", id, to, refused))
				}
			}
			res.figure("hops", 1)
		}
	}
	res.figure("chains-started", int64(started))
	res.figure("chains-called", int64(len(chains)))
	if final.Exec != nil {
		w.checkExec(&res, final.Exec, expected, replies)
	}
	res.finish()
	return res
}

// checkExec checks the message executions in the nodes' logs against the
// ids the chains' senders must have derived.
func (w *Transfers) checkExec(res *Result, logs map[string][]ExecEntry, expected, replies map[string]string) {
	ours := map[string]bool{}
	for _, o := range w.Objects() {
		ours[o] = true
	}
	runs := map[string]int{}
	owners := make([]string, 0, len(logs))
	for n := range logs {
		owners = append(owners, n)
	}
	sort.Strings(owners)
	for _, n := range owners {
		for _, e := range logs[n] {
			for op, from := range e.Messages {
				if !ours[from] {
					continue
				}
				to, ok := expected[op]
				switch {
				case !ok:
					res.violate("message-id-not-derived", e.Object, fmt.Sprintf("%s executed message %s from %s, an id no chain's sender derives", n, op, from))
				case to != e.Object:
					res.violate("message-misrouted", e.Object, fmt.Sprintf("message %s for %s executed on %s by %s", op, to, e.Object, n))
				}
			}
			for _, op := range e.OperationIDs {
				if _, ok := expected[op]; ok {
					runs[op]++
				}
				if _, ok := replies[op]; ok {
					runs[op]++
				}
			}
		}
	}
	logged := 0
	for op, to := range expected {
		switch n := runs[op]; {
		case n == 1:
			logged++
		case n > 1:
			res.violate("message-executed-twice", to, fmt.Sprintf("message %s executed %d times", op, n))
		}
	}
	for op, from := range replies {
		if runs[op] > 1 {
			res.violate("reply-executed-twice", from, fmt.Sprintf("OnReply turn %s ran %d times", op, runs[op]))
		}
	}
	res.figure("messages-logged", int64(logged))
	res.figure("messages-unlogged", int64(len(expected)-logged))
}

func countOf(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// acksOf counts the answers recorded for txid ("txid" or "txid!code") and
// returns the first refusal's code.
func acksOf(acks []string, txid string) (int, string) {
	n, refused := 0, ""
	for _, a := range acks {
		id, code, bad := strings.Cut(a, "!")
		if id != txid {
			continue
		}
		n++
		if bad && refused == "" {
			refused = code
		}
	}
	return n, refused
}

var _ Settler = (*Transfers)(nil)
