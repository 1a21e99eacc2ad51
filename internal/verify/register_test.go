package verify

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

const reg = "actor/register/r0"

type rget struct {
	Value   string `json:"value"`
	Version int64  `json:"version"`
}

type rput struct {
	Version int64 `json:"version"`
}

type rcas struct {
	OK      bool   `json:"ok"`
	Value   string `json:"value"`
	Version int64  `json:"version"`
}

func checkRegister(b *hist, audit *AuditResult) Result {
	return (&Register{Prefix: "", N: 1}).Check(b.h, b.finalState(audit))
}

// A correct history: sequential and concurrent writes, a cas that fails, an
// unknown put that did happen and one that did not, a final read.
func TestRegisterLinearizable(t *testing.T) {
	b := newHist()
	b.ok(1, "register", reg, "put", []string{"a"}, rput{1}, 0, 10, g11)
	b.ok(2, "register", reg, "get", nil, rget{"a", 1}, 11, 12, g11)
	// concurrent put b / get: the get may see a or b
	b.ok(1, "register", reg, "put", []string{"b"}, rput{2}, 20, 30, g11)
	b.ok(2, "register", reg, "get", nil, rget{"a", 1}, 21, 25, g11)
	b.ok(2, "register", reg, "cas", []string{"a", "c"}, rcas{false, "b", 2}, 31, 32, g11)
	b.ok(2, "register", reg, "cas", []string{"b", "c"}, rcas{true, "c", 3}, 33, 34, g11)
	b.unknown(1, "register", reg, "put", []string{"d"}, 40) // happened
	b.ok(1, "register", reg, "get", nil, rget{"d", 4}, 50, 51, g11)
	b.unknown(2, "register", reg, "put", []string{"e"}, 52) // never happened
	b.final(3, "register", reg, "get", rget{"d", 4}, 60, 61, g11)
	r := checkRegister(b, nil)
	wantClean(t, r)
	if r.Verdict != "Ok" || r.Acked != 3 {
		t.Fatalf("verdict %s acked %d", r.Verdict, r.Acked)
	}
}

// A stale read: b acknowledged, then a read (called after) returns a.
func TestRegisterStaleRead(t *testing.T) {
	b := newHist()
	b.ok(1, "register", reg, "put", []string{"a"}, rput{1}, 0, 10, g11)
	b.ok(1, "register", reg, "put", []string{"b"}, rput{2}, 20, 30, g11)
	b.ok(2, "register", reg, "get", nil, rget{"a", 1}, 40, 41, g11)
	b.final(3, "register", reg, "get", rget{"b", 2}, 60, 61, g11)
	r := checkRegister(b, nil)
	if r.Verdict != "Illegal" {
		t.Fatalf("verdict %s, want Illegal", r.Verdict)
	}
	v := wantViolation(t, r.Violations, "linearizable")
	if len(v.Ops) == 0 {
		t.Fatal("no history excerpt")
	}
	t.Logf("%s", v)
}

// A lost write in the same generation: porcupine catches it (the final read
// does not show the acknowledged put).
func TestRegisterLostWrite(t *testing.T) {
	b := newHist()
	b.ok(1, "register", reg, "put", []string{"a"}, rput{1}, 0, 10, g11)
	b.final(3, "register", reg, "get", rget{"", 0}, 60, 61, g11)
	if r := checkRegister(b, nil); r.Verdict != "Illegal" {
		t.Fatalf("verdict %s, want Illegal", r.Verdict)
	}
}

// A relocation is an operation: once it committed (a2) and its request
// returned, the old owner (a1) serving a read is illegal, even with the
// right value.
func TestRegisterStaleOwnerAfterRelocation(t *testing.T) {
	audit := &AuditResult{Commits: map[string]Transition{
		"rel-1": {Object: reg, Kind: "commit", Record: record.Record{ObjectGeneration: 1, AuthorityGeneration: 2}},
	}}
	build := func(stale bool) *hist {
		b := newHist()
		b.ok(1, "register", reg, "put", []string{"a"}, rput{1}, 0, 10, g11)
		b.h.AddRelocation(Relocation{Object: reg, Call: ms(20), Return: ms(30), Result: "completed", RelocationID: "rel-1"})
		f := fence("n2", 1, 2)
		if stale {
			f = g11
		}
		b.ok(2, "register", reg, "get", nil, rget{"a", 1}, 40, 41, f)
		b.final(3, "register", reg, "get", rget{"a", 1}, 60, 61, fence("n2", 1, 2))
		return b
	}
	wantClean(t, checkRegister(build(false), audit))
	r := checkRegister(build(true), audit)
	if r.Verdict != "Illegal" {
		t.Fatalf("a read served by the superseded owner: verdict %s, want Illegal", r.Verdict)
	}
	// Without the relocation as an operation, the same history is
	// linearizable (the final read alone orders a2 after the stale read).
	if r := checkRegister(build(true), nil); r.Verdict != "Ok" {
		t.Fatalf("without the audit: verdict %s", r.Verdict)
	}
}

// A generation that decreases between two replies is illegal.
func TestRegisterGenerationDecreases(t *testing.T) {
	b := newHist()
	b.ok(1, "register", reg, "put", []string{"a"}, rput{1}, 0, 10, fence("n2", 1, 2))
	b.ok(2, "register", reg, "get", nil, rget{"a", 1}, 20, 21, g11)
	b.final(3, "register", reg, "get", rget{"a", 1}, 60, 61, fence("n2", 1, 2))
	if r := checkRegister(b, nil); r.Verdict != "Illegal" {
		t.Fatalf("verdict %s, want Illegal", r.Verdict)
	}
}

// The owner of a memory object crashed: StateLost declares generation 1
// gone, the register is empty at generation 2. Its put counts as declared
// lost; the same history without the StateLost reply is a silent loss.
func TestRegisterDeclaredLoss(t *testing.T) {
	build := func(declare bool) *hist {
		b := newHist()
		b.ok(1, "register", reg, "put", []string{"a"}, rput{1}, 0, 10, g11)
		if declare {
			b.fail(1, "register", reg, "get", nil, pb.Code_CODE_STATE_LOST, 20, 30, fence("n2", 2, 2))
		}
		b.ok(2, "register", reg, "get", nil, rget{"", 0}, 40, 41, fence("n2", 2, 2))
		b.final(3, "register", reg, "get", rget{"", 0}, 60, 61, fence("n2", 2, 2))
		return b
	}
	r := checkRegister(build(true), nil)
	wantClean(t, r)
	if r.DeclaredLost != 1 {
		t.Fatalf("declared lost %d, want 1", r.DeclaredLost)
	}
	r = checkRegister(build(false), nil)
	wantViolation(t, r.Violations, "silent-loss")
	if r.Lost != 1 || r.SilentLost != 1 {
		t.Fatalf("lost %d silent %d", r.Lost, r.SilentLost)
	}
	if c := CheckFences(build(false).h, nil); c.Undeclared != 1 {
		t.Fatalf("undeclared %d:\n%s", c.Undeclared, violations(c.Violations))
	}
}

// A write answered StateLost was not executed under the new generation, but
// the owner that died may have executed it: a read of the old generation
// may show it; the new generation must not.
func TestRegisterStateLostWriteRanOnDeadOwner(t *testing.T) {
	g2 := fence("n2", 2, 2)
	build := func(newGen string) *hist {
		b := newHist()
		b.ok(1, "register", reg, "put", []string{"a"}, rput{1}, 0, 10, g11)
		b.fail(1, "register", reg, "put", []string{"x"}, pb.Code_CODE_STATE_LOST, 20, 40, g2)
		b.ok(2, "register", reg, "get", nil, rget{"x", 2}, 25, 26, g11) // ran on n1 before it died
		v := int64(0)
		if newGen != "" {
			v = 1
		}
		b.final(3, "register", reg, "get", rget{newGen, v}, 60, 61, g2)
		return b
	}
	wantClean(t, checkRegister(build(""), nil))
	if r := checkRegister(build("x"), nil); r.Verdict != "Illegal" {
		t.Fatalf("a write refused with StateLost shows in the new generation: verdict %s", r.Verdict)
	}
}

// A reply answered from the de-duplication table carries the replier's
// fence, not the one the request ran under: the model takes it as a bound.
// The first operation of a history may be such a replay (its first attempt's
// reply was lost), and a replay may carry an authority generation newer than
// the one it ran under.
func TestRegisterReplayedReplies(t *testing.T) {
	f := func(aut int64) Fence { return fence("n1", 1, aut) }
	ops := []porcupine.Operation{
		{ClientId: 1, Input: regInput{Kind: regPut, Value: "a"}, Call: 0, Return: 10, Output: regOutput{Version: 1, Fence: f(1), Replayed: true}},
		{ClientId: 2, Input: regInput{Kind: regGet}, Call: 11, Return: 12, Output: regOutput{Value: "a", Version: 1, Fence: f(1)}},
		{ClientId: 3, Input: regInput{Kind: regReloc, Obj: 1, Gen: 2}, Call: 13, Return: 14, Output: regOutput{}},
		// ran at a1 (before the move, inside its call), answered at a2
		{ClientId: 1, Input: regInput{Kind: regGet}, Call: 12, Return: 20, Output: regOutput{Value: "a", Version: 1, Fence: f(2), Replayed: true}},
		{ClientId: 2, Input: regInput{Kind: regPut, Value: "b"}, Call: 15, Return: 16, Output: regOutput{Version: 2, Fence: f(2)}},
	}
	if r := porcupine.CheckOperations(RegisterModel, ops); !r {
		t.Errorf("replayed replies refused")
	}
	// A replay still cannot show a value no execution could have seen.
	bad := append(ops[:len(ops):len(ops)], porcupine.Operation{ClientId: 4, Input: regInput{Kind: regGet}, Call: 17, Return: 18,
		Output: regOutput{Value: "a", Version: 1, Fence: f(2), Replayed: true}})
	if porcupine.CheckOperations(RegisterModel, bad) {
		t.Errorf("a replayed read of a value overwritten before its call was accepted")
	}
}
