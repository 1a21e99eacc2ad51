package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/internal/verify/rotor"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Bank constants (pkg/actor/builtin bank): 8 accounts of 100.
const (
	bankAccounts = 8
	bankInitial  = 100
	bankTotal    = bankAccounts * bankInitial
)

// Bank is the bank workload: transfers with unique transfer ids between the
// 8 accounts of N bank objects, and reads. Checks: every read has the 8
// accounts, none negative, summing to 800, and balances that are exactly
// the ledger's transfers applied to the initial ones (no torn state); the
// ledger has no duplicate, no transfer never attempted or refused, and
// (like a list) every acknowledged transfer in order in later reads; the
// final ledger holds every acknowledged transfer id exactly once unless its
// generation was declared lost.
type Bank struct {
	Prefix    string
	N         int
	Think     time.Duration
	MaxAmount int // default 5
	// Rotate moves each of the N slots on to a fresh bank after that many
	// acknowledged transfers (0: never), so that the ledger every read
	// returns stays small in long runs (see rotor).
	Rotate int
	// Type is the object type (default "bank"); "dbank" runs the workload on
	// the durable variant (pkg/actor/builtin DurableTypes), whose objects
	// survive a crash of their owner: then no StateLost is declared and
	// every acknowledged write must be in the final read. The workload is
	// named after its type, so both variants can run side by side.
	Type string

	rot rotor.Lazy
}

// NewBank returns the workload on n objects.
func NewBank(prefix string, n int) *Bank { return &Bank{Prefix: prefix, N: n} }

// Name implements Workload.
func (w *Bank) Name() string { return w.typ() }

func (w *Bank) typ() string { return typeOr(w.Type, "bank") }

// Objects implements Workload.
func (w *Bank) Objects() []string { return w.names().Objects() }

func (w *Bank) names() *rotor.Rotor { return w.rot.Get(w.typ(), w.Prefix+"b", w.N, w.Rotate) }

// FinalRead implements Workload.
func (w *Bank) FinalRead() (string, []string) { return "read", nil }

// Run implements Workload.
func (w *Bank) Run(ctx context.Context, s Stream, h *History) {
	rng := newRand(s.ID)
	rot := w.names()
	maxAmount := max(w.MaxAmount, 1)
	if w.MaxAmount == 0 {
		maxAmount = 5
	}
	var mustRead string
	seq := 0
	for ctx.Err() == nil {
		slot := rng.IntN(w.N)
		obj := rot.Current(slot)
		var op Op
		if mustRead != "" || rng.IntN(10) < 3 {
			if mustRead != "" {
				obj = mustRead
			}
			op = Invoke(ctx, s, h, w.Name(), obj, "read")
			if op.Outcome == OK {
				mustRead = ""
			}
		} else {
			seq++
			from := rng.IntN(bankAccounts)
			to := (from + 1 + rng.IntN(bankAccounts-1)) % bankAccounts
			op = Invoke(ctx, s, h, w.Name(), obj, "transfer", fmt.Sprintf("a%d", from), fmt.Sprintf("a%d", to),
				strconv.Itoa(1+rng.IntN(maxAmount)), fmt.Sprintf("t%d-%d", s.ID, seq))
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

type bankReadReply struct {
	Balances map[string]int64 `json:"balances"`
	Ledger   []string         `json:"ledger"`
	Total    int64            `json:"total"`
}

type transferArgs struct {
	from, to int
	amount   int64
}

func parseTransfer(in []string) (transferArgs, bool) {
	if len(in) != 4 || len(in[0]) != 2 || len(in[1]) != 2 {
		return transferArgs{}, false
	}
	f, t := int(in[0][1]-'0'), int(in[1][1]-'0')
	a, err := strconv.ParseInt(in[2], 10, 64)
	if err != nil || f < 0 || f >= bankAccounts || t < 0 || t >= bankAccounts {
		return transferArgs{}, false
	}
	return transferArgs{from: f, to: t, amount: a}, true
}

// Check implements Workload.
func (w *Bank) Check(h *History, final FinalState) Result {
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
		transfers := map[string]Op{}
		var reads []seqRead
		for _, o := range per[obj] {
			switch {
			case o.Kind == "transfer" && len(o.Input) == 4:
				transfers[o.Input[3]] = o
				if o.Outcome == OK {
					res.Acked++
				}
				if o.Outcome == Fail && o.Code == pb.Code_CODE_APPLICATION_ERROR {
					res.figure("refused-transfers", 1)
				}
			case o.Kind == "read" && o.Outcome == OK:
				var r bankReadReply
				if err := json.Unmarshal(o.Output, &r); err != nil {
					res.violate("reply", obj, "read reply: "+err.Error(), o)
					continue
				}
				res.figure("reads", 1)
				w.checkRead(&res, obj, o, r, transfers)
				reads = append(reads, seqRead{op: o, items: r.Ledger})
			}
		}
		checkSequence(&res, obj, reads, transfers, func(Op) int { return -1 }, "transfer")
		fin, ok := final.Reads[obj]
		if !ok {
			continue
		}
		var r bankReadReply
		_ = json.Unmarshal(fin.Output, &r)
		present := map[string]bool{}
		for _, id := range r.Ledger {
			present[id] = true
		}
		res.accountAll(obj, "transfer", transfers, present, fin, losses[obj])
		res.figure("final-ledger", int64(len(r.Ledger)))
	}
	res.finish()
	return res
}

// checkRead checks one read's balances: the 8 accounts, none negative, the
// total, and equal to the ledger's transfers applied to the initial balances.
func (w *Bank) checkRead(res *Result, obj string, o Op, r bankReadReply, transfers map[string]Op) {
	var sum int64
	for i := range bankAccounts {
		v, ok := r.Balances[fmt.Sprintf("a%d", i)]
		if !ok {
			res.violate("bank-accounts", obj, fmt.Sprintf("account a%d missing from a read", i), o)
			return
		}
		if v < 0 {
			res.violate("bank-negative", obj, fmt.Sprintf("account a%d at %d", i, v), o)
		}
		sum += v
	}
	if len(r.Balances) != bankAccounts {
		res.violate("bank-accounts", obj, fmt.Sprintf("%d accounts in a read", len(r.Balances)), o)
	}
	if sum != bankTotal || r.Total != bankTotal {
		res.figure("wrong-total", 1)
		res.violate("bank-total", obj, fmt.Sprintf("balances sum to %d (reply says %d), want %d", sum, r.Total, bankTotal), o)
	}
	var want [bankAccounts]int64
	for i := range want {
		want[i] = bankInitial
	}
	for _, id := range r.Ledger {
		t, ok := transfers[id]
		if !ok {
			return // reported as unexpected by checkSequence
		}
		a, ok := parseTransfer(t.Input)
		if !ok {
			return
		}
		want[a.from] -= a.amount
		want[a.to] += a.amount
	}
	for i, v := range want {
		if got := r.Balances[fmt.Sprintf("a%d", i)]; got != v {
			res.violate("bank-torn", obj, fmt.Sprintf("account a%d at %d, the ledger's %d transfers give %d", i, got, len(r.Ledger), v), o)
			return
		}
	}
}
