package verify

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/wire"
)

// transfersHistory: two banks x0, x1 (Transfers{N: 2}); one chain x0 → x1
// of 1 whose call was acknowledged, with operation id op. mutate edits the
// final reads and the execution logs before the check.
func transfersCheck(t *testing.T, mutate func(b0, b1 *bankFinal, logs map[string][]ExecEntry)) Result {
	t.Helper()
	w := &Transfers{N: 2}
	objs := w.Objects()
	op := wire.NewOperationID()
	b := newHist()
	o := b.ok(1, "transfers", objs[0], "chain", []string{"x1-1", "1", objs[1]}, bankTransfer{OK: true}, 0, 10, g11)
	b.h.mu.Lock()
	b.h.ops[o.ID].OpID = op.String()
	b.h.mu.Unlock()
	b0 := bankFinal{Ledger: []string{"x1-1"}, Total: bankTotal - 1, Sent: 1, Acks: []string{"x1-1"}}
	b1 := bankFinal{Ledger: []string{}, Total: bankTotal + 1, Received: 1, Hops: []string{"x1-1"}}
	hop := actor.MessageID(op, 0)
	logs := map[string][]ExecEntry{
		"n1@1": {{Object: objs[0], ObjectGeneration: 1, AuthorityGeneration: 1, OperationIDs: []string{op.String(), actor.ReplyOperationID(hop).String()},
			Replies: map[string]string{actor.ReplyOperationID(hop).String(): hop.String()}}},
		"n2@1": {{Object: objs[1], ObjectGeneration: 1, AuthorityGeneration: 1, OperationIDs: []string{hop.String()},
			Messages: map[string]string{hop.String(): objs[0]}}},
	}
	if mutate != nil {
		mutate(&b0, &b1, logs)
	}
	b.final(9, "transfers", objs[0], "read", b0, 60, 61, g11)
	b.final(9, "transfers", objs[1], "read", b1, 60, 61, g11)
	fs := b.finalState(nil)
	fs.Exec = logs
	return w.Check(b.h, fs)
}

type bankTransfer struct {
	OK bool `json:"ok"`
}

func TestTransfersCorrect(t *testing.T) {
	r := transfersCheck(t, nil)
	wantClean(t, r)
	if r.Figures["chains-started"] != 1 || r.Figures["hops"] != 1 || r.Figures["messages-logged"] != 1 {
		t.Fatalf("figures %v", r.Figures)
	}
}

func TestTransfersLostMessage(t *testing.T) {
	r := transfersCheck(t, func(_, b1 *bankFinal, logs map[string][]ExecEntry) {
		b1.Hops, b1.Total, b1.Received = nil, bankTotal, 0
		delete(logs, "n2@1")
	})
	wantViolation(t, r.Violations, "message-lost")
	wantViolation(t, r.Violations, "transfers-total")
}

func TestTransfersDuplicatedMessage(t *testing.T) {
	r := transfersCheck(t, func(_, b1 *bankFinal, logs map[string][]ExecEntry) {
		b1.Hops, b1.Total, b1.Received = []string{"x1-1", "x1-1"}, bankTotal+2, 2
		e := logs["n2@1"][0]
		logs["n3@1"] = []ExecEntry{e}
	})
	wantViolation(t, r.Violations, "message-duplicated")
	wantViolation(t, r.Violations, "message-executed-twice")
	wantViolation(t, r.Violations, "transfers-total")
}

func TestTransfersReplyTwiceOrRefused(t *testing.T) {
	r := transfersCheck(t, func(b0, _ *bankFinal, _ map[string][]ExecEntry) { b0.Acks = []string{"x1-1", "x1-1"} })
	wantViolation(t, r.Violations, "reply-duplicated")
	r = transfersCheck(t, func(b0, _ *bankFinal, _ map[string][]ExecEntry) { b0.Acks = []string{"x1-1!operation_expired"} })
	wantViolation(t, r.Violations, "message-refused")
}

// A message executed under an id its sender cannot have derived (a
// non-deterministic id) is found in the logs.
func TestTransfersNotDerivedID(t *testing.T) {
	r := transfersCheck(t, func(_, _ *bankFinal, logs map[string][]ExecEntry) {
		other := wire.NewOperationID().String()
		e := logs["n2@1"][0]
		e.OperationIDs = []string{other}
		e.Messages = map[string]string{other: e.Messages[firstKey(e.Messages)]}
		logs["n2@1"] = []ExecEntry{e}
	})
	wantViolation(t, r.Violations, "message-id-not-derived")
	if r.Figures["messages-unlogged"] != 1 {
		t.Fatalf("figures %v", r.Figures)
	}
}

func firstKey(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}
