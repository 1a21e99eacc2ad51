package builtin

import (
	"strconv"
	"strings"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/wire"
)

// Transfers between banks by message (docs/design.md §13): the worked
// example of Context.Ask and OnReply, and the verification suite's
// transfers workload (internal/verify).
//
//	chain TXID AMOUNT BANK…   a client's call: a0 gives AMOUNT to the first
//	                          BANK, which passes it on to the next, …; the
//	                          last keeps it
//	hop TXID AMOUNT [BANK…]   the message: a0 gets AMOUNT, and passes it on
//	                          to the first BANK when there is one
//
// Each bank counts what it sent and received (the total of its accounts is
// BankTotal − sent + received, which Restore checks), lists the TXID of
// every hop it executed (hops: a hop executed twice shows twice — it is
// never refused as a duplicate, so that a checker sees it), and of every
// answer its OnReply took (acks: "TXID", or "TXID!<code>" when the
// destination refused or the message expired). Across all banks the sum of
// the accounts stays constant once every message was answered; a message
// lost or executed twice changes it.

// Bounds of a chain.
const (
	// MaxChainHops bounds the banks of one chain.
	MaxChainHops = 16
	// MaxChainAmount bounds AMOUNT (sums stay far from overflow).
	MaxChainAmount = 1 << 30
)

func clone(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}

// chainArgs reads TXID AMOUNT BANK… (at least min banks).
func chainArgs(method string, args [][]byte, minBanks int) (string, int64, []string, error) {
	if len(args) < 2+minBanks || len(args) > 2+MaxChainHops {
		return "", 0, nil, actor.InvalidArgument("%s %s takes TXID AMOUNT and %d to %d banks, got %d arguments", BankType, method, minBanks, MaxChainHops, len(args))
	}
	txid := string(args[0])
	if err := validTxID(txid); err != nil {
		return "", 0, nil, actor.InvalidArgument("%v", err)
	}
	amount, err := parseInt64("AMOUNT", args[1])
	if err != nil {
		return "", 0, nil, err
	}
	if amount <= 0 || amount > MaxChainAmount {
		return "", 0, nil, actor.InvalidArgument("AMOUNT %d is outside [1, %d]", amount, MaxChainAmount)
	}
	var banks []string
	for _, a := range args[2:] {
		if err := actor.ValidateMessage(string(a), "hop", nil); err != nil {
			return "", 0, nil, actor.InvalidArgument("bank %q: %v", a, err)
		}
		banks = append(banks, string(a))
	}
	return txid, amount, banks, nil
}

// pass asks banks[0] to hop amount on to banks[1:].
func pass(ctx actor.Context, txid string, amount int64, banks []string) error {
	args := [][]byte{[]byte(txid), strconv.AppendInt(nil, amount, 10)}
	for _, b := range banks[1:] {
		args = append(args, []byte(b))
	}
	return ctx.Ask(banks[0], "hop", args...)
}

func (b *bank) chain(ctx actor.Context, args [][]byte) ([]byte, error) {
	txid, amount, banks, err := chainArgs("chain", args, 1)
	if err != nil {
		return nil, err
	}
	if _, dup := b.applied[txid]; dup {
		return nil, actor.Rejected("duplicate txid %q", txid)
	}
	if b.balances[0] < amount {
		return nil, actor.Rejected("insufficient funds: a0 has %d, chain of %d", b.balances[0], amount)
	}
	if len(b.ledger) >= MaxLedger {
		return nil, actor.Rejected("ledger is full (%d transfers)", MaxLedger)
	}
	if err := pass(ctx, txid, amount, banks); err != nil {
		return nil, err // nothing changed
	}
	b.balances[0] -= amount
	b.sent += amount
	b.ledger = append(b.ledger, txid)
	if b.applied == nil {
		b.applied = map[string]struct{}{}
	}
	b.applied[txid] = struct{}{}
	return reply(bankTransfer{OK: true})
}

func (b *bank) hop(ctx actor.Context, args [][]byte) ([]byte, error) {
	txid, amount, banks, err := chainArgs("hop", args, 0)
	if err != nil {
		return nil, err
	}
	if len(b.hops) >= MaxLedger {
		return nil, actor.Rejected("hop list is full (%d hops)", MaxLedger)
	}
	if len(banks) > 0 {
		if err := pass(ctx, txid, amount, banks); err != nil {
			return nil, err // nothing changed
		}
		b.sent += amount // in and out again: a0 stays
	} else {
		b.balances[0] += amount
	}
	b.received += amount
	b.hops = append(b.hops, txid)
	return reply(bankTransfer{OK: true})
}

// OnReply implements actor.ReplyObject: the answer of a hop this bank sent.
func (b *bank) OnReply(_ actor.Context, r actor.MessageReply) error {
	if len(b.acks) >= MaxLedger || len(r.Args) == 0 {
		return nil
	}
	ack := string(r.Args[0])
	if r.Err != nil {
		ack += "!" + wire.CodeName(wire.CodeOf(r.Err))
	}
	b.acks = append(b.acks, ack)
	return nil
}

// restoreMessages checks the message fields of a snapshot.
func restoreMessages(s *bankState) error {
	switch {
	case s.Sent < 0 || s.Received < 0 || s.Sent > MaxLedger*MaxChainAmount || s.Received > MaxLedger*MaxChainAmount:
		return corrupt(BankType, "sent %d, received %d", s.Sent, s.Received)
	case len(s.Hops) > MaxLedger || len(s.Acks) > MaxLedger:
		return corrupt(BankType, "%d hops, %d acks", len(s.Hops), len(s.Acks))
	}
	for _, id := range s.Hops {
		if err := validTxID(id); err != nil {
			return corrupt(BankType, "hops: %v", err)
		}
	}
	for _, a := range s.Acks {
		id, code, _ := strings.Cut(a, "!")
		if err := validTxID(id); err != nil || strings.ContainsAny(code, "!\"\\") || len(code) > 32 {
			return corrupt(BankType, "acks: %q", a)
		}
	}
	return nil
}

var _ actor.ReplyObject = (*bank)(nil)
