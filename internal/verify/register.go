package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meshloc/meshloc/pkg/record"
)

// Register is the register/CAS workload, checked with porcupine per object.
// Every written value is unique; a stream that got an unknown outcome reads
// the object before its next write. A committed relocation (from the
// relocator's history, joined with the audit's commit) is an operation of the
// model that raises the authority generation, so a reply served by a
// superseded owner after it is illegal.
type Register struct {
	// Prefix of the object ids, unique per run.
	Prefix string
	// N objects actor/register/<Prefix><i>.
	N int
	// Think is the pause between two operations of a stream.
	Think time.Duration
	// CheckTimeout bounds porcupine per object (0: 30 s).
	CheckTimeout time.Duration
	// ArtifactDir: where a non-linearizable object's history is written
	// as porcupine's HTML visualization ("" = not written).
	ArtifactDir string
}

// NewRegister returns the workload on n objects.
func NewRegister(prefix string, n int) *Register { return &Register{Prefix: prefix, N: n} }

// Name implements Workload.
func (w *Register) Name() string { return "register" }

// Objects implements Workload.
func (w *Register) Objects() []string { return objectNames("register", w.Prefix+"r", w.N) }

// FinalRead implements Workload.
func (w *Register) FinalRead() (string, []string) { return "get", nil }

type registerReply struct {
	OK      bool   `json:"ok"`
	Value   string `json:"value"`
	Version int64  `json:"version"`
}

// Run implements Workload.
func (w *Register) Run(ctx context.Context, s Stream, h *History) {
	rng := newRand(s.ID)
	objs := w.Objects()
	seen := map[string]string{} // last value this stream read or wrote
	var mustRead string         // an object whose last write's outcome is unknown
	seq := 0
	for ctx.Err() == nil {
		obj := pick(rng, objs)
		if mustRead != "" {
			obj = mustRead
		}
		var op Op
		switch x := rng.IntN(10); {
		case mustRead != "" || x < 3:
			op = Invoke(ctx, s, h, w.Name(), obj, "get")
			if op.Outcome == OK {
				var r registerReply
				if json.Unmarshal(op.Output, &r) == nil {
					seen[obj] = r.Value
				}
				mustRead = ""
			}
		case x < 7:
			seq++
			v := fmt.Sprintf("c%d-%d", s.ID, seq)
			op = Invoke(ctx, s, h, w.Name(), obj, "put", v)
			if op.Outcome == OK {
				seen[obj] = v
			}
		default:
			seq++
			v := fmt.Sprintf("c%d-%d", s.ID, seq)
			op = Invoke(ctx, s, h, w.Name(), obj, "cas", seen[obj], v)
			if op.Outcome == OK {
				var r registerReply
				if json.Unmarshal(op.Output, &r) == nil {
					seen[obj] = r.Value
				}
			}
		}
		if op.Outcome == Unknown {
			mustRead = obj
		}
		if op.StateLost() {
			seen[obj] = ""
		}
		pause(ctx, w.Think)
	}
}

// ---------------------------------------------------------------- model

type regKind uint8

const (
	regGet regKind = iota + 1
	regPut
	regCAS
	regLost  // a StateLost reply: observes the generation, changes nothing
	regReloc // a committed relocation: raises the authority generation
)

type regInput struct {
	Kind     regKind
	Value    string // put: the value; cas: the new value
	Old      string // cas
	Obj, Gen int64  // reloc: the committed generations
	// Before, for a write of unknown outcome: it can only have taken
	// effect under an object generation older than this (0: any). A write
	// answered StateLost was not executed under the new generation, but
	// may have been by the owner that died.
	Before int64
}

type regOutput struct {
	Unknown bool
	OK      bool // cas
	Value   string
	Version int64
	Fence   Fence
	// Replayed: answered from the de-duplication table, which travels with
	// the state: the request ran earlier, under the same object generation
	// and an authority generation no newer than Fence's (the replier's).
	Replayed bool
}

type regState struct {
	Value          string
	Version        int64
	ObjGen, AutGen int64
}

// RegisterModel is the porcupine model of one register object: the state
// is the value, its version and the generations of the current owner; a
// reply must come from the current (object, authority) generation; a larger
// object generation re-creates the register empty.
var RegisterModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(regState), input.(regInput), output.(regOutput)
		if in.Kind == regReloc {
			if in.Obj < st.ObjGen || in.Obj == st.ObjGen && in.Gen < st.AutGen {
				return false, st
			}
			if in.Obj > st.ObjGen {
				st = regState{ObjGen: in.Obj}
			}
			st.AutGen = in.Gen
			return true, st
		}
		if out.Unknown { // linearised at the end it is the same as never
			if in.Before > 0 && st.ObjGen >= in.Before {
				return true, st
			}
			switch in.Kind {
			case regPut:
				st.Value, st.Version = in.Value, st.Version+1
			case regCAS:
				if st.Value == in.Old {
					st.Value, st.Version = in.Value, st.Version+1
				}
			}
			return true, st
		}
		f := out.Fence
		if f.ObjectGeneration < st.ObjGen || f.ObjectGeneration == st.ObjGen && f.AuthorityGeneration < st.AutGen {
			return false, st // served by a superseded owner
		}
		if out.Replayed {
			// It ran at some earlier point of this object generation,
			// under an authority generation the fence only bounds: the
			// generation may begin here, the authority generation does not
			// move.
			if f.ObjectGeneration > st.ObjGen {
				st = regState{ObjGen: f.ObjectGeneration}
			}
		} else {
			if f.ObjectGeneration > st.ObjGen {
				st = regState{ObjGen: f.ObjectGeneration}
			}
			st.AutGen = f.AuthorityGeneration
		}
		switch in.Kind {
		case regLost:
			return true, st
		case regGet:
			return out.Value == st.Value && out.Version == st.Version, st
		case regPut:
			ok := out.Version == st.Version+1
			st.Value, st.Version = in.Value, st.Version+1
			return ok, st
		case regCAS:
			if st.Value != in.Old {
				return !out.OK && out.Value == st.Value && out.Version == st.Version, st
			}
			ok := out.OK && out.Value == in.Value && out.Version == st.Version+1
			st.Value, st.Version = in.Value, st.Version+1
			return ok, st
		}
		return false, st
	},
	Hash: func(state any) uint64 {
		st := state.(regState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d", st.Value, st.Version, st.ObjGen, st.AutGen)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		res := fmt.Sprintf("%q v%d", out.Value, out.Version)
		if out.Unknown {
			res = "unknown"
		}
		fence := fmt.Sprintf(" {o%d/a%d %s}", out.Fence.ObjectGeneration, out.Fence.AuthorityGeneration, out.Fence.OwnerPair())
		switch in.Kind {
		case regGet:
			return "get → " + res + fence
		case regPut:
			return fmt.Sprintf("put %q → %s%s", in.Value, res, fence)
		case regCAS:
			return fmt.Sprintf("cas %q %q → ok=%v %s%s", in.Old, in.Value, out.OK, res, fence)
		case regLost:
			return "state_lost" + fence
		case regReloc:
			return fmt.Sprintf("relocation committed o%d/a%d", in.Obj, in.Gen)
		}
		return "?"
	},
	DescribeState: func(state any) string {
		st := state.(regState)
		return fmt.Sprintf("%q v%d o%d/a%d", st.Value, st.Version, st.ObjGen, st.AutGen)
	},
}

// registerOps converts the workload's operations of one object (and the
// committed relocations of it) to porcupine operations; ops[i] is the
// history op behind the i-th porcupine operation (nil for a relocation).
func registerOps(ops []Op, relocs []relocOp) ([]porcupine.Operation, []*Op) {
	var out []porcupine.Operation
	var src []*Op
	for i := range ops {
		o := &ops[i]
		in := regInput{}
		switch o.Kind {
		case "get":
			in.Kind = regGet
		case "put":
			in.Kind = regPut
			if len(o.Input) > 0 {
				in.Value = o.Input[0]
			}
		case "cas":
			in.Kind = regCAS
			if len(o.Input) > 1 {
				in.Old, in.Value = o.Input[0], o.Input[1]
			}
		default:
			continue
		}
		var outp regOutput
		switch {
		case o.Outcome == OK:
			var r registerReply
			if err := json.Unmarshal(o.Output, &r); err != nil {
				continue
			}
			if in.Kind == regPut {
				r.Value = in.Value
			}
			outp = regOutput{OK: r.OK, Value: r.Value, Version: r.Version, Fence: o.Fence, Replayed: o.Replayed}
		case o.StateLost() && o.Fence.Known():
			if in.Kind != regGet {
				// The write may have run on the owner that died: if it
				// did, it ran before that owner died, so before the object
				// was re-created, so before this reply returned. Bounding
				// it there (not at infinity) keeps porcupine's search
				// small when thousands of writes meet a crash.
				w := in
				w.Before = o.Fence.ObjectGeneration
				out = append(out, porcupine.Operation{ClientId: 2_000_000 + o.ID, Input: w, Call: o.Call, Output: regOutput{Unknown: true}, Return: o.Return, Metadata: o.ID})
				src = append(src, o)
			}
			in = regInput{Kind: regLost}
			outp = regOutput{Fence: o.Fence}
		case o.Outcome == Unknown && in.Kind != regGet:
			outp = regOutput{Unknown: true}
		default:
			continue // failed or unknown reads have no effect
		}
		ret := o.Return
		if outp.Unknown {
			ret = Infinity
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call, Output: outp, Return: ret, Metadata: o.ID})
		src = append(src, o)
	}
	for i, r := range relocs {
		out = append(out, porcupine.Operation{ClientId: 1_000_000 + i, Input: regInput{Kind: regReloc, Obj: r.obj, Gen: r.gen},
			Call: r.call, Output: regOutput{}, Return: r.ret, Metadata: -1})
		src = append(src, nil)
	}
	return out, src
}

// relocOp is a committed relocation of one object as a model operation.
type relocOp struct {
	call, ret int64
	obj, gen  int64
	owner     record.OwnerRef
}

// committedRelocations joins the relocator's attempts with the audit's
// commits: a relocation whose commit etcd shows is an operation from the
// request's call to its return (Infinity when the request never answered).
func committedRelocations(h *History, audit *AuditResult) map[string][]relocOp {
	out := map[string][]relocOp{}
	if audit == nil {
		return out
	}
	for _, r := range h.Relocations() {
		if r.RelocationID == "" {
			continue
		}
		c, ok := audit.Commits[r.RelocationID]
		if !ok || c.Object != r.Object {
			continue
		}
		ret := r.Return
		if r.Result != "completed" {
			ret = Infinity
		}
		out[r.Object] = append(out[r.Object], relocOp{call: r.Call, ret: ret, obj: c.Record.ObjectGeneration, gen: c.Record.AuthorityGeneration, owner: c.Record.Owner})
	}
	return out
}

// Check implements Workload.
func (w *Register) Check(h *History, final FinalState) Result {
	res := Result{Workload: w.Name()}
	ops := opsOf(h, w.Name())
	res.count(ops)
	losses := DeclaredLosses(ops)
	relocs := committedRelocations(h, final.Audit)
	per := byObject(ops)
	timeout := w.CheckTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	verdict := porcupine.Ok
	var took time.Duration
	objs := make([]string, 0, len(per))
	for o := range per {
		objs = append(objs, o)
	}
	sort.Strings(objs)
	for _, obj := range objs {
		oops := per[obj]
		fin, haveFinal := final.Reads[obj]
		for _, o := range oops {
			if o.Outcome != OK || o.Kind == "get" {
				continue
			}
			var r registerReply
			_ = json.Unmarshal(o.Output, &r)
			if o.Kind == "cas" && !r.OK {
				continue
			}
			res.Acked++
			if haveFinal && o.Fence.ObjectGeneration < fin.Fence.ObjectGeneration {
				// the register's value under the final generation is
				// checked by porcupine; here only the fate of older writes.
				res.account(writeFate(o.Fence.ObjectGeneration, fin.Fence.ObjectGeneration, losses[obj]), false, obj, "write "+strings.Join(o.Input, " "), o, fin)
			}
		}
		pops, src := registerOps(oops, relocs[obj])
		res.figure("porcupine-ops", int64(len(pops)))
		res.figure("relocation-ops", int64(len(relocs[obj])))
		start := time.Now()
		r, info := porcupine.CheckOperationsVerbose(RegisterModel, pops, timeout)
		took += time.Since(start)
		switch r {
		case porcupine.Illegal:
			verdict = porcupine.Illegal
			res.violate("linearizable", obj, "porcupine: the register's history is not linearizable"+w.visualize(obj, info), linearizationExcerpt(info, src, oops)...)
		case porcupine.Unknown:
			if verdict == porcupine.Ok {
				verdict = porcupine.Unknown
			}
			res.violate("linearizable", obj, fmt.Sprintf("porcupine gave up after %v", timeout))
		}
	}
	res.figure("porcupine-ms", took.Milliseconds())
	res.Verdict = string(verdict)
	res.finish()
	return res
}

func (w *Register) visualize(obj string, info porcupine.LinearizationInfo) string {
	if w.ArtifactDir == "" {
		return ""
	}
	path := filepath.Join(w.ArtifactDir, strings.ReplaceAll(obj, "/", "_")+".html")
	if err := os.MkdirAll(w.ArtifactDir, 0o755); err != nil {
		return ""
	}
	if err := porcupine.VisualizePath(RegisterModel, info, path); err != nil {
		return ""
	}
	return " (visualization: " + path + ")"
}

// linearizationExcerpt returns the history ops around where the longest
// partial linearization stops: its last few ops and the next ones by call
// time that could not be linearized after it.
func linearizationExcerpt(info porcupine.LinearizationInfo, src []*Op, all []Op) []Op {
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	if longest == nil {
		return excerpt(all, 12)
	}
	in := map[int]bool{}
	var out []Op
	var lastCall int64
	for k, i := range longest {
		in[i] = true
		if i < len(src) && src[i] != nil {
			if src[i].Call > lastCall {
				lastCall = src[i].Call
			}
			if k >= len(longest)-4 {
				out = append(out, *src[i])
			}
		}
	}
	n := 0
	for i, o := range src {
		if o == nil || in[i] || n >= 8 {
			continue
		}
		if o.Call >= lastCall-int64(time.Second) {
			out = append(out, *o)
			n++
		}
	}
	return excerpt(out, 16)
}
