package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Workload is one checked workload: its streams generate load on its own
// objects; after heal its final reads give the final state; Check compares
// the history with it.
type Workload interface {
	// Name is unique in a run ("bank", "register", ...).
	Name() string
	// Objects the workload uses.
	Objects() []string
	// Run is one sequential client stream; it returns when ctx ends (the
	// operation in flight then completes or times out on its own).
	Run(ctx context.Context, s Stream, h *History)
	// FinalRead is the read that gives an object's final state.
	FinalRead() (method string, args []string)
	// Check checks the workload's operations of h against the final state.
	Check(h *History, final FinalState) Result
}

// FinalState is what the checkers compare the history with.
type FinalState struct {
	// Reads are the successful final reads after heal, by object. An object
	// missing here was not readable (liveness).
	Reads map[string]Op
	// Audit is the etcd audit of the run (nil: none).
	Audit *AuditResult
	// Exec are the nodes' execution logs (nil: none), by owner.
	Exec map[string][]ExecEntry
}

// Settler is a workload whose effects continue after its calls returned
// (messages between its objects): Run calls Settle after heal, before the
// final reads, to wait until they stopped (bounded by ctx). An error is
// reported; the checks still run.
type Settler interface {
	Settle(ctx context.Context, s Stream, h *History) error
}

// Violation is one thing a checker found wrong.
type Violation struct {
	// Check names the property ("lost", "duplicated", "linearizable", ...).
	Check  string `json:"check"`
	Object string `json:"object,omitempty"`
	Detail string `json:"detail"`
	// Ops is an excerpt of the history that shows it.
	Ops []Op `json:"ops,omitempty"`
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", v.Check)
	if v.Object != "" {
		fmt.Fprintf(&b, " %s", v.Object)
	}
	fmt.Fprintf(&b, ": %s", v.Detail)
	for _, o := range v.Ops {
		fmt.Fprintf(&b, "\n      %s", o)
	}
	return b.String()
}

// Result of one workload's check: its figures and violations.
type Result struct {
	Workload string `json:"workload"`
	// Verdict: "ok" or "violations"; for Register porcupine's result
	// ("Ok", "Illegal", "Unknown").
	Verdict string `json:"verdict"`
	Objects int    `json:"objects"`
	Ops     int    `json:"ops"`
	OK      int    `json:"ok"`
	Failed  int    `json:"failed"`
	Unknown int    `json:"unknown"`
	// Acked writes; Lost: acknowledged under the final generation and
	// missing (silent); DeclaredLost: acknowledged under a generation whose
	// loss a StateLost reply declared; SilentLost counts losses without
	// such a declaration (included in Lost).
	Acked        int `json:"acked"`
	Lost         int `json:"lost"`
	DeclaredLost int `json:"declaredLost"`
	SilentLost   int `json:"silentLost"`
	Duplicated   int `json:"duplicated"`
	Unexpected   int `json:"unexpected"`
	// StaleReads: reads missing a write acknowledged before they were called.
	StaleReads int              `json:"staleReads"`
	Figures    map[string]int64 `json:"figures,omitempty"`
	Violations []Violation      `json:"violations,omitempty"`
	// Suppressed violations: beyond maxPerCheck of one check on one object
	// only the number is kept.
	Suppressed int `json:"suppressed,omitempty"`
	shown      map[string]int
}

// maxPerCheck bounds the violations listed per check and object.
const maxPerCheck = 5

func (r *Result) violate(check, object, detail string, ops ...Op) {
	if r.shown == nil {
		r.shown = map[string]int{}
	}
	k := check + "\x00" + object
	if r.shown[k] >= maxPerCheck {
		r.Suppressed++
		return
	}
	r.shown[k]++
	r.Violations = append(r.Violations, Violation{Check: check, Object: object, Detail: detail, Ops: ops})
}

func (r *Result) figure(name string, d int64) {
	if r.Figures == nil {
		r.Figures = map[string]int64{}
	}
	r.Figures[name] += d
}

func (r *Result) finish() {
	if r.Verdict == "" {
		r.Verdict = "ok"
		if len(r.Violations) > 0 {
			r.Verdict = "violations"
		}
	}
}

// count fills the operation figures of r from ops.
func (r *Result) count(ops []Op) {
	objs := map[string]bool{}
	for _, o := range ops {
		objs[o.Object] = true
		r.Ops++
		switch o.Outcome {
		case OK:
			r.OK++
		case Fail:
			r.Failed++
		case Unknown:
			r.Unknown++
		}
	}
	r.Objects = len(objs)
}

// opsOf returns the workload's operations.
func opsOf(h *History, workload string) []Op {
	var out []Op
	for _, o := range h.Ops() {
		if o.Workload == workload {
			out = append(out, o)
		}
	}
	return out
}

// fate says what must have happened to a write acknowledged under object
// generation g, given the final read's generation final and the StateLost
// replies seen for the object.
type fate int

const (
	mustBePresent fate = iota // same generation as the final read
	declaredLost              // a StateLost reply declared generation g gone
	silentlyLost              // superseded without any declaration
	fromTheFuture             // acknowledged under a newer generation than the final read
)

func writeFate(g, final int64, losses []DeclaredLoss) fate {
	switch {
	case g == final:
		return mustBePresent
	case g > final:
		return fromTheFuture
	}
	for _, l := range losses {
		if l.Generation > g {
			return declaredLost
		}
	}
	return silentlyLost
}

// account applies the fate of one acknowledged write that is missing from
// the final state (present=false) or found there.
func (r *Result) account(f fate, present bool, object, what string, write, final Op) {
	switch f {
	case mustBePresent:
		if !present {
			r.Lost++
			r.SilentLost++
			r.violate("lost", object, what+" acknowledged and missing from the final read", write, final)
		}
	case declaredLost:
		if !present {
			r.DeclaredLost++
		}
	case silentlyLost:
		if present {
			return
		}
		r.Lost++
		r.SilentLost++
		r.violate("silent-loss", object, fmt.Sprintf("%s acknowledged under object generation %d; the final read is of generation %d and no StateLost reply declared the loss",
			what, write.Fence.ObjectGeneration, final.Fence.ObjectGeneration), write, final)
	case fromTheFuture:
		r.violate("stale-final", object, fmt.Sprintf("%s acknowledged under object generation %d, newer than the final read's %d",
			what, write.Fence.ObjectGeneration, final.Fence.ObjectGeneration), write, final)
	}
}

// pick returns a random element.
func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// objectNames returns n names actor/<typ>/<prefix><i>.
func objectNames(typ, prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("actor/%s/%s%d", typ, prefix, i)
	}
	return out
}

func newRand(stream int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(stream)+1, uint64(time.Now().UnixNano())))
}

// pause sleeps d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// excerpt returns up to n ops around the ones that matter, in call order.
func excerpt(ops []Op, n int) []Op {
	ops = append([]Op(nil), ops...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	if len(ops) > n {
		ops = ops[len(ops)-n:]
	}
	return ops
}

// accountAll checks every acknowledged write of one object against the
// final read: present holds what the final read shows, by write key.
func (r *Result) accountAll(obj, kind string, writes map[string]Op, present map[string]bool, final Op, losses []DeclaredLoss) {
	for key, w := range writes {
		if w.Outcome == OK {
			r.account(writeFate(w.Fence.ObjectGeneration, final.Fence.ObjectGeneration, losses), present[key], obj, kind+" "+key, w, final)
		}
	}
}

// typeOr is a workload's object type: t, or def when t is empty.
func typeOr(t, def string) string {
	if t == "" {
		return def
	}
	return t
}
