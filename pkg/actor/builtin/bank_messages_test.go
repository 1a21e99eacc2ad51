package builtin

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func readBank(t *testing.T, b *bank) bankRead {
	t.Helper()
	out, err := b.Handle(newFakeContext(BankType), "read", nil)
	if err != nil {
		t.Fatal(err)
	}
	var r bankRead
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// A chain A → B → C by messages: A gives, B passes on, C keeps; each
// bank's total is BankTotal − sent + received, and every hop is listed.
func TestBankChainByMessages(t *testing.T) {
	a, b, c := newBank(), newBank(), newBank()
	ctx := newFakeContext(BankType)
	if _, err := a.Handle(ctx, "chain", args([]string{"t1", "30", "actor/dbank/b", "actor/dbank/c"})); err != nil {
		t.Fatal(err)
	}
	if len(ctx.sent) != 1 || ctx.sent[0].To != "actor/dbank/b" || ctx.sent[0].Method != "hop" || !ctx.sent[0].Ask {
		t.Fatalf("sent %+v", ctx.sent)
	}
	bctx := newFakeContext(BankType)
	if _, err := b.Handle(bctx, "hop", ctx.sent[0].Args); err != nil {
		t.Fatal(err)
	}
	if len(bctx.sent) != 1 || bctx.sent[0].To != "actor/dbank/c" || len(bctx.sent[0].Args) != 2 {
		t.Fatalf("b passed on %+v", bctx.sent)
	}
	cctx := newFakeContext(BankType)
	if _, err := c.Handle(cctx, "hop", bctx.sent[0].Args); err != nil || len(cctx.sent) != 0 {
		t.Fatalf("c: %v, sent %v", err, cctx.sent)
	}
	if err := a.OnReply(ctx, actor.MessageReply{Args: ctx.sent[0].Args}); err != nil {
		t.Fatal(err)
	}
	if err := b.OnReply(ctx, actor.MessageReply{Args: bctx.sent[0].Args, Err: wire.Errorf(pb.Code_CODE_OPERATION_EXPIRED, "late")}); err != nil {
		t.Fatal(err)
	}
	ra, rb, rc := readBank(t, a), readBank(t, b), readBank(t, c)
	if ra.Total != BankTotal-30 || ra.Sent != 30 || rb.Total != BankTotal || rb.Sent != 30 || rb.Received != 30 || rc.Total != BankTotal+30 || rc.Received != 30 {
		t.Fatalf("totals: a %+v b %+v c %+v", ra, rb, rc)
	}
	if ra.Total+rb.Total+rc.Total != 3*BankTotal {
		t.Fatal("not conserved")
	}
	if len(rb.Hops) != 1 || len(rc.Hops) != 1 || len(ra.Acks) != 1 || ra.Acks[0] != "t1" || rb.Acks[0] != "t1!operation_expired" {
		t.Fatalf("hops and acks: a %v b %v/%v c %v", ra.Acks, rb.Hops, rb.Acks, rc.Hops)
	}
	// Every state still round-trips (Restore checks the totals).
	for _, x := range []*bank{a, b, c} {
		checkState(t, actor.Type{Name: BankType, New: func() actor.Object { return newBank() }}, x)
	}
	// A hop executed twice shows twice (no silent de-duplication).
	if _, err := c.Handle(cctx, "hop", bctx.sent[0].Args); err != nil || len(readBank(t, c).Hops) != 2 {
		t.Fatalf("a second hop: %v", err)
	}
}

func TestBankChainRefusals(t *testing.T) {
	b := newBank()
	ctx := newFakeContext(BankType)
	for name, a := range map[string][]string{
		"no banks":      {"t1", "5"},
		"bad amount":    {"t1", "0", "actor/bank/x"},
		"big amount":    {"t1", "2000000000", "actor/bank/x"},
		"bad bank":      {"t1", "5", "group/g"},
		"bad txid":      {"t 1", "5", "actor/bank/x"},
		"too many hops": append([]string{"t1", "5"}, make([]string, MaxChainHops+1)...),
	} {
		if _, err := b.Handle(ctx, "chain", args(a)); !errors.Is(err, actor.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := b.Handle(ctx, "chain", args([]string{"t1", "101", "actor/bank/x"})); !errors.Is(err, actor.ErrRejected) {
		t.Errorf("insufficient funds: %v", err)
	}
	if len(ctx.sent) != 0 || readBank(t, b).Sent != 0 {
		t.Fatalf("a refused chain sent %v", ctx.sent)
	}
	if _, err := b.Handle(ctx, "chain", args([]string{"t1", "1", "actor/bank/x"})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Handle(ctx, "chain", args([]string{"t1", "1", "actor/bank/x"})); !errors.Is(err, actor.ErrRejected) {
		t.Errorf("duplicate txid: %v", err)
	}
}

func TestBankRestoreChecksMessageTotals(t *testing.T) {
	for name, s := range map[string]string{
		"sent not in total": `{"v":1,"balances":{"a0":100,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":[],"sent":5}`,
		"negative received": `{"v":1,"balances":{"a0":95,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":[],"received":-5}`,
		"bad hop id":        `{"v":1,"balances":{"a0":100,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":[],"hops":["a b"]}`,
	} {
		if err := newBank().Restore([]byte(s)); !errors.Is(err, actor.ErrCorruptState) {
			t.Errorf("%s: %v", name, err)
		}
	}
	ok := `{"v":1,"balances":{"a0":130,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":[],"sent":10,"received":40,"hops":["c1"],"acks":["c2!application_error"]}`
	if err := newBank().Restore([]byte(ok)); err != nil {
		t.Fatal(err)
	}
}
