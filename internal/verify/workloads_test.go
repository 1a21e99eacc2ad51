package verify

import (
	"testing"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

const lst = "actor/list/l0"

type lapp struct {
	Length int `json:"length"`
}

type lread struct {
	Items []string `json:"items"`
}

func checkList(b *hist) Result { return (&List{N: 1}).Check(b.h, b.finalState(nil)) }

// listHistory: two clients append; one append's outcome is unknown (it did
// happen); reads in between; final read. mutate changes the final items.
func listHistory(final []string, f Fence) *hist {
	b := newHist()
	b.ok(1, "list", lst, "append", []string{"c1-1"}, lapp{1}, 0, 10, g11)
	b.ok(2, "list", lst, "append", []string{"c2-1"}, lapp{2}, 11, 20, g11)
	b.ok(2, "list", lst, "read", nil, lread{[]string{"c1-1", "c2-1"}}, 21, 22, g11)
	b.unknown(1, "list", lst, "append", []string{"c1-2"}, 25)
	b.ok(1, "list", lst, "read", nil, lread{[]string{"c1-1", "c2-1", "c1-2"}}, 30, 31, g11)
	b.ok(2, "list", lst, "append", []string{"c2-2"}, lapp{4}, 32, 40, g11)
	b.final(9, "list", lst, "read", lread{final}, 60, 61, f)
	return b
}

func TestListCorrect(t *testing.T) {
	r := checkList(listHistory([]string{"c1-1", "c2-1", "c1-2", "c2-2"}, g11))
	wantClean(t, r)
	if r.Acked != 3 {
		t.Fatalf("acked %d", r.Acked)
	}
}

func TestListLostWrite(t *testing.T) {
	r := checkList(listHistory([]string{"c1-1", "c2-1", "c1-2"}, g11))
	wantViolation(t, r.Violations, "lost")
	if r.Lost != 1 {
		t.Fatalf("lost %d, want 1", r.Lost)
	}
}

func TestListDuplicatedAppend(t *testing.T) {
	r := checkList(listHistory([]string{"c1-1", "c2-1", "c1-2", "c2-2", "c2-2"}, g11))
	wantViolation(t, r.Violations, "duplicated")
	if r.Duplicated != 1 {
		t.Fatalf("duplicated %d, want 1", r.Duplicated)
	}
}

func TestListUnexpectedAndReordered(t *testing.T) {
	r := checkList(listHistory([]string{"c1-1", "c2-1", "c1-2", "zz", "c2-2"}, g11))
	wantViolation(t, r.Violations, "unexpected")
	wantViolation(t, r.Violations, "order") // c2-2 was acknowledged at position 3
	r = checkList(listHistory([]string{"c2-1", "c1-1", "c1-2", "c2-2"}, g11))
	wantViolation(t, r.Violations, "prefix")
}

func TestListStaleRead(t *testing.T) {
	b := listHistory([]string{"c1-1", "c2-1", "c1-2", "c2-2"}, g11)
	b.ok(3, "list", lst, "read", nil, lread{[]string{"c1-1"}}, 45, 46, g11) // after c2-1 was acknowledged
	r := checkList(b)
	wantViolation(t, r.Violations, "stale-read")
}

// The list's owner crashed: the final read is of generation 2 (empty but
// for one new append). Declared: the three acknowledged appends are declared
// lost; not declared: lost silently.
func TestListDeclaredLoss(t *testing.T) {
	g2 := fence("n2", 2, 2)
	build := func(declare bool) *hist {
		b := listHistory([]string{"n-1"}, g2)
		if declare {
			b.fail(3, "list", lst, "append", []string{"x"}, pb.Code_CODE_STATE_LOST, 50, 51, g2)
		}
		b.ok(3, "list", lst, "append", []string{"n-1"}, lapp{1}, 52, 53, g2)
		return b
	}
	r := checkList(build(true))
	wantClean(t, r)
	if r.DeclaredLost != 3 {
		t.Fatalf("declared lost %d, want 3", r.DeclaredLost)
	}
	r = checkList(build(false))
	wantViolation(t, r.Violations, "silent-loss")
	if r.Lost != 3 {
		t.Fatalf("lost %d, want 3", r.Lost)
	}
}

// ---------------------------------------------------------------- bank

const bnk = "actor/bank/b0"

func balances(delta map[int]int64) map[string]int64 {
	m := map[string]int64{}
	for i := range bankAccounts {
		m[accountName(i)] = bankInitial + delta[i]
	}
	return m
}

func accountName(i int) string { return string([]byte{'a', byte('0' + i)}) }

type bread struct {
	Balances map[string]int64 `json:"balances"`
	Ledger   []string         `json:"ledger"`
	Total    int64            `json:"total"`
}

func bankHistory(final bread) *hist {
	b := newHist()
	b.ok(1, "bank", bnk, "transfer", []string{"a0", "a1", "5", "t1-1"}, map[string]bool{"ok": true}, 0, 10, g11)
	b.ok(2, "bank", bnk, "read", nil, bread{balances(map[int]int64{0: -5, 1: 5}), []string{"t1-1"}, 800}, 11, 12, g11)
	b.fail(2, "bank", bnk, "transfer", []string{"a2", "a3", "500", "t2-1"}, pb.Code_CODE_APPLICATION_ERROR, 13, 14, g11)
	b.unknown(1, "bank", bnk, "transfer", []string{"a1", "a2", "3", "t1-2"}, 15)
	b.ok(2, "bank", bnk, "transfer", []string{"a3", "a0", "2", "t2-2"}, map[string]bool{"ok": true}, 20, 30, g11)
	b.final(9, "bank", bnk, "read", final, 60, 61, g11)
	return b
}

func checkBank(b *hist) Result { return (&Bank{N: 1}).Check(b.h, b.finalState(nil)) }

func TestBankCorrect(t *testing.T) {
	good := bread{balances(map[int]int64{0: -3, 1: 2, 2: 3, 3: -2}), []string{"t1-1", "t1-2", "t2-2"}, 800}
	wantClean(t, checkBank(bankHistory(good)))
	// the unknown transfer did not happen
	good = bread{balances(map[int]int64{0: -3, 1: 5, 3: -2}), []string{"t1-1", "t2-2"}, 800}
	wantClean(t, checkBank(bankHistory(good)))
}

func TestBankLostTransfer(t *testing.T) {
	lost := bread{balances(map[int]int64{0: -5, 1: 5}), []string{"t1-1"}, 800}
	r := checkBank(bankHistory(lost))
	wantViolation(t, r.Violations, "lost")
	if r.Lost != 1 {
		t.Fatalf("lost %d", r.Lost)
	}
}

func TestBankDuplicatedTransfer(t *testing.T) {
	dup := bread{balances(map[int]int64{0: -8, 1: 5, 3: -2}), []string{"t1-1", "t2-2", "t1-1"}, 800}
	r := checkBank(bankHistory(dup))
	wantViolation(t, r.Violations, "duplicated")
}

func TestBankRefusedTransferApplied(t *testing.T) {
	bad := bread{balances(map[int]int64{0: -3, 1: 5, 2: -500, 3: 498}), []string{"t1-1", "t2-1", "t2-2"}, 800}
	r := checkBank(bankHistory(bad))
	wantViolation(t, r.Violations, "unexpected")
	wantViolation(t, r.Violations, "bank-negative")
}

func TestBankWrongTotalAndTornState(t *testing.T) {
	wrong := bread{balances(map[int]int64{0: -3, 1: 5, 3: -1}), []string{"t1-1", "t2-2"}, 801}
	wantViolation(t, checkBank(bankHistory(wrong)).Violations, "bank-total")
	torn := bread{balances(map[int]int64{0: -3, 2: 5, 3: -2}), []string{"t1-1", "t2-2"}, 800}
	wantViolation(t, checkBank(bankHistory(torn)).Violations, "bank-torn")
}

// ---------------------------------------------------------------- counter

const ctr = "actor/counter/k0"

type cval struct {
	Value int64 `json:"value"`
}

func counterHistory(final int64, read int64) *hist {
	b := newHist()
	b.ok(1, "counter", ctr, "add", []string{"1"}, cval{1}, 0, 10, g11)
	b.ok(2, "counter", ctr, "add", []string{"1"}, cval{2}, 5, 15, g11)
	b.unknown(1, "counter", ctr, "add", []string{"1"}, 20)
	b.ok(2, "counter", ctr, "get", nil, cval{read}, 30, 31, g11)
	b.ok(2, "counter", ctr, "add", []string{"1"}, cval{read + 1}, 32, 33, g11)
	b.final(9, "counter", ctr, "get", cval{final}, 60, 61, g11)
	return b
}

func checkCounter(b *hist) Result { return (&Counter{N: 1}).Check(b.h, b.finalState(nil)) }

func TestCounterBounds(t *testing.T) {
	wantClean(t, checkCounter(counterHistory(3, 2))) // the unknown add did not happen
	wantClean(t, checkCounter(counterHistory(4, 3))) // it did
	r := checkCounter(counterHistory(2, 2))          // 3 acknowledged, final 2
	wantViolation(t, r.Violations, "lost")
	if r.Lost != 1 {
		t.Fatalf("lost %d", r.Lost)
	}
	r = checkCounter(counterHistory(5, 2)) // at most 4 adds
	wantViolation(t, r.Violations, "counter-bounds")
	if r.Duplicated != 1 {
		t.Fatalf("duplicated %d", r.Duplicated)
	}
	r = checkCounter(counterHistory(3, 1)) // the read missed an acknowledged add
	wantViolation(t, r.Violations, "counter-bounds")
	if r.StaleReads != 2 { // the read, and the add after it
		t.Fatalf("stale %d", r.StaleReads)
	}
}

func TestListStateLostAppendRanOnDeadOwner(t *testing.T) {
	g2 := fence("n2", 2, 2)
	build := func(final []string) *hist {
		b := newHist()
		b.ok(1, "list", lst, "append", []string{"c1-1"}, lapp{1}, 0, 10, g11)
		b.fail(1, "list", lst, "append", []string{"c1-2"}, pb.Code_CODE_STATE_LOST, 20, 40, g2)
		b.ok(2, "list", lst, "read", nil, lread{[]string{"c1-1", "c1-2"}}, 25, 26, g11) // ran on n1 before it died
		b.final(3, "list", lst, "read", lread{final}, 60, 61, g2)
		return b
	}
	r := checkList(build([]string{}))
	wantClean(t, r)
	if r.DeclaredLost != 1 {
		t.Fatalf("declared lost %d", r.DeclaredLost)
	}
	wantViolation(t, checkList(build([]string{"c1-2"})).Violations, "unexpected")
}
