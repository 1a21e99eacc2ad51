package builtin

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/actor"
)

// Bank constants: 8 accounts "a0".."a7" of 100 each at activation.
const (
	BankAccounts       = 8
	BankInitialBalance = 100
	BankTotal          = BankAccounts * BankInitialBalance
	// MaxTxIDLen bounds a transfer id; it is made of letters, digits and - _ . : @.
	MaxTxIDLen = 128
	// MaxLedger bounds the applied transfers; beyond it transfers are rejected.
	MaxLedger = 1 << 20
)

// bankMaxStateBytes: every ledger entry is a quoted plain-ASCII id and a comma.
const bankMaxStateBytes = MaxLedger*(MaxTxIDLen+3) + 1024

// bank is 8 accounts and the ledger of the transfer ids applied, in order.
// The total is always BankTotal minus what it sent to other banks plus
// what it received from them (always BankTotal for a bank that sends no
// message), and a transfer id is applied at most once: the invariants a
// test checks after any number of moves and retries.
//
//	transfer FROM TO AMOUNT TXID   → {"ok":true}
//	read                           → {"balances":{"a0":100,...},"ledger":["txid",...],"total":800}
//	chain TXID AMOUNT BANK…        → {"ok":true}   (bank_messages.go)
//	hop TXID AMOUNT [BANK…]        → {"ok":true}   (a message from another bank)
//
// AMOUNT is a decimal int64 > 0; FROM and TO are different accounts.
// Insufficient funds and a TXID already in the ledger are rejected
// (actor.ErrRejected); an unknown account is an invalid argument.
type bank struct {
	balances [BankAccounts]int64
	ledger   []string
	applied  map[string]struct{}
	// Messages between banks (bank_messages.go).
	sent, received int64
	hops, acks     []string
}

// newBank returns a bank at activation: every account at 100.
func newBank() *bank {
	b := &bank{applied: map[string]struct{}{}}
	for i := range b.balances {
		b.balances[i] = BankInitialBalance
	}
	return b
}

type bankState struct {
	V        int              `json:"v"`
	Balances map[string]int64 `json:"balances"`
	Ledger   []string         `json:"ledger"`
	Sent     int64            `json:"sent,omitempty"`
	Received int64            `json:"received,omitempty"`
	Hops     []string         `json:"hops,omitempty"`
	Acks     []string         `json:"acks,omitempty"`
}

type bankRead struct {
	Balances map[string]int64 `json:"balances"`
	Ledger   []string         `json:"ledger"`
	Total    int64            `json:"total"`
	Sent     int64            `json:"sent,omitempty"`
	Received int64            `json:"received,omitempty"`
	Hops     []string         `json:"hops,omitempty"`
	Acks     []string         `json:"acks,omitempty"`
}

type bankTransfer struct {
	OK bool `json:"ok"`
}

func accountName(i int) string { return fmt.Sprintf("a%d", i) }

func account(b []byte) (int, bool) {
	if len(b) == 2 && b[0] == 'a' && b[1] >= '0' && b[1] < '0'+BankAccounts {
		return int(b[1] - '0'), true
	}
	return 0, false
}

func validTxID(id string) error {
	if id == "" || len(id) > MaxTxIDLen {
		return fmt.Errorf("transfer id of %d bytes (want 1 to %d)", len(id), MaxTxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':' || c == '@') {
			return fmt.Errorf("transfer id %q has byte %q (allowed: letters, digits, - _ . : @)", id, c)
		}
	}
	return nil
}

// Handle implements actor.Object.
func (b *bank) Handle(ctx actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "transfer":
		return b.transfer(args)
	case "read":
		if err := wantArgs(BankType, method, args); err != nil {
			return nil, err
		}
		return reply(bankRead{Balances: b.balanceMap(), Ledger: b.ledgerCopy(), Total: b.total(),
			Sent: b.sent, Received: b.received, Hops: clone(b.hops), Acks: clone(b.acks)})
	case "chain":
		return b.chain(ctx, args)
	case "hop":
		return b.hop(ctx, args)
	}
	return nil, actor.UnknownMethod(BankType, method)
}

func (b *bank) transfer(args [][]byte) ([]byte, error) {
	if err := wantArgs(BankType, "transfer", args, "FROM", "TO", "AMOUNT", "TXID"); err != nil {
		return nil, err
	}
	from, ok := account(args[0])
	if !ok {
		return nil, actor.InvalidArgument("unknown account %q (accounts: a0 to a%d)", args[0], BankAccounts-1)
	}
	to, ok := account(args[1])
	if !ok {
		return nil, actor.InvalidArgument("unknown account %q (accounts: a0 to a%d)", args[1], BankAccounts-1)
	}
	if from == to {
		return nil, actor.InvalidArgument("transfer from %s to itself", accountName(from))
	}
	amount, err := parseInt64("AMOUNT", args[2])
	if err != nil {
		return nil, err
	}
	if amount <= 0 {
		return nil, actor.InvalidArgument("AMOUNT %d is not > 0", amount)
	}
	txid := string(args[3])
	if err := validTxID(txid); err != nil {
		return nil, actor.InvalidArgument("%v", err)
	}
	if _, dup := b.applied[txid]; dup {
		return nil, actor.Rejected("duplicate txid %q", txid)
	}
	if b.balances[from] < amount {
		return nil, actor.Rejected("insufficient funds: %s has %d, transfer of %d", accountName(from), b.balances[from], amount)
	}
	if len(b.ledger) >= MaxLedger {
		return nil, actor.Rejected("ledger is full (%d transfers)", MaxLedger)
	}
	b.balances[from] -= amount
	b.balances[to] += amount
	b.ledger = append(b.ledger, txid)
	if b.applied == nil {
		b.applied = map[string]struct{}{}
	}
	b.applied[txid] = struct{}{}
	return reply(bankTransfer{OK: true})
}

func (b *bank) balanceMap() map[string]int64 {
	m := make(map[string]int64, BankAccounts)
	for i, v := range b.balances {
		m[accountName(i)] = v
	}
	return m
}

func (b *bank) ledgerCopy() []string { return append(make([]string, 0, len(b.ledger)), b.ledger...) }

func (b *bank) total() int64 {
	var t int64
	for _, v := range b.balances {
		t += v
	}
	return t
}

// Snapshot implements actor.Object.
func (b *bank) Snapshot() ([]byte, error) {
	return snapshot(bankState{V: stateVersion, Balances: b.balanceMap(), Ledger: b.ledgerCopy(),
		Sent: b.sent, Received: b.received, Hops: clone(b.hops), Acks: clone(b.acks)})
}

// Restore implements actor.Object. Besides the format it checks the
// invariants: the 8 accounts, none negative, the total, the ledger's ids
// valid and unique.
func (b *bank) Restore(data []byte) error {
	var s bankState
	if err := restore(BankType, data, &s, &s.V); err != nil {
		return err
	}
	if len(s.Balances) != BankAccounts || s.Ledger == nil || len(s.Ledger) > MaxLedger {
		return corrupt(BankType, "%d accounts and %d ledger entries", len(s.Balances), len(s.Ledger))
	}
	if err := restoreMessages(&s); err != nil { // bank_messages.go
		return err
	}
	var nb bank
	var total int64
	for i := range nb.balances {
		v, ok := s.Balances[accountName(i)]
		if !ok || v < 0 || v > BankTotal+s.Received {
			return corrupt(BankType, "account %s missing or out of range", accountName(i))
		}
		nb.balances[i] = v
		total += v
	}
	if total != BankTotal-s.Sent+s.Received {
		return corrupt(BankType, "total %d, want %d (%d sent, %d received)", total, BankTotal-s.Sent+s.Received, s.Sent, s.Received)
	}
	nb.sent, nb.received, nb.hops, nb.acks = s.Sent, s.Received, s.Hops, s.Acks
	nb.applied = make(map[string]struct{}, len(s.Ledger))
	for _, id := range s.Ledger {
		if err := validTxID(id); err != nil {
			return corrupt(BankType, "ledger: %v", err)
		}
		if _, dup := nb.applied[id]; dup {
			return corrupt(BankType, "ledger: transfer id %q twice", id)
		}
		nb.applied[id] = struct{}{}
	}
	nb.ledger = s.Ledger
	*b = nb
	return nil
}
