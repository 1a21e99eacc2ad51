package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Infinity is the return time of an operation whose outcome is unknown
// (porcupine's convention: it may take effect at any time after its call).
const Infinity = math.MaxInt64

// Outcome of an operation as its client saw it.
type Outcome uint8

// Outcomes.
const (
	// OK: acknowledged; the reply is in Output.
	OK Outcome = iota + 1
	// Fail: definitely without effect (not executed, or refused by the
	// object without changing it: StateLost, an application refusal, bad
	// input).
	Fail
	// Unknown: may or may not have taken effect (deadline, unavailable).
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Fail:
		return "fail"
	case Unknown:
		return "unknown"
	}
	return "invalid"
}

// MarshalText implements encoding.TextMarshaler.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (o *Outcome) UnmarshalText(b []byte) error {
	for _, x := range []Outcome{OK, Fail, Unknown} {
		if x.String() == string(b) {
			*o = x
			return nil
		}
	}
	return fmt.Errorf("verify: outcome %q", b)
}

// Fence is the identity a reply was served under (docs/design.md §1): the owner
// pair and the object and authority-owner generations. Zero when unknown.
type Fence struct {
	Owner               string `json:"owner,omitempty"`
	OwnerGeneration     int64  `json:"ownerGeneration,omitempty"`
	ObjectGeneration    int64  `json:"objectGeneration,omitempty"`
	AuthorityGeneration int64  `json:"authorityGeneration,omitempty"`
}

// FenceOf converts an authority fence.
func FenceOf(f authority.Fence) Fence {
	return Fence{Owner: f.Owner.ID, OwnerGeneration: f.Owner.Generation, ObjectGeneration: f.ObjectGeneration, AuthorityGeneration: f.AuthorityGeneration}
}

// Known reports whether the fence was recorded.
func (f Fence) Known() bool { return f.ObjectGeneration > 0 }

// Newer reports whether f is strictly newer than g: a larger object
// generation, or the same with a larger authority generation.
func (f Fence) Newer(g Fence) bool {
	if f.ObjectGeneration != g.ObjectGeneration {
		return f.ObjectGeneration > g.ObjectGeneration
	}
	return f.AuthorityGeneration > g.AuthorityGeneration
}

// OwnerPair is "id@generation".
func (f Fence) OwnerPair() string { return fmt.Sprintf("%s@%d", f.Owner, f.OwnerGeneration) }

func (f Fence) String() string {
	if !f.Known() {
		return "-"
	}
	return fmt.Sprintf("%s o%d/a%d", f.OwnerPair(), f.ObjectGeneration, f.AuthorityGeneration)
}

// Payload is a reply's bytes; in JSON, as they are when they are JSON (the
// built-in types answer JSON), else as a string.
type Payload []byte

// MarshalJSON implements json.Marshaler.
func (p Payload) MarshalJSON() ([]byte, error) {
	if json.Valid(p) {
		return append([]byte(nil), p...), nil
	}
	return json.Marshal(string(p))
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *Payload) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' && json.Unmarshal(b, &s) == nil {
		*p = Payload(s)
		return nil
	}
	*p = append(Payload(nil), b...)
	return nil
}

// Op is one recorded operation.
type Op struct {
	// ID is the operation's index in the history.
	ID int `json:"id"`
	// Client is the sequential client stream that issued it.
	Client   int    `json:"client"`
	Workload string `json:"workload"`
	Object   string `json:"object"`
	// Kind is the method ("get", "put", "append", "transfer", ...).
	Kind  string   `json:"kind"`
	Input []string `json:"input,omitempty"`
	// Output is the reply payload of an OK operation.
	Output Payload `json:"output,omitempty"`
	// Call and Return are nanoseconds since the run started (monotonic);
	// Return is Infinity when the outcome is Unknown.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	// End is when the client call returned, for every outcome (latency).
	End     int64   `json:"end"`
	Outcome Outcome `json:"outcome"`
	// Code is the reply's code for Fail and Unknown (0 when none).
	Code pb.Code `json:"code,omitempty"`
	Err  string  `json:"err,omitempty"`
	// Fence the reply was served under: always for OK; for Fail when the
	// reply carried one (StateLost: the new generation).
	Fence    Fence  `json:"fence"`
	OpID     string `json:"opId,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	// Final marks the reads after heal (liveness).
	Final bool `json:"final,omitempty"`
}

// Latency of the call as the client saw it.
func (o Op) Latency() time.Duration { return time.Duration(o.End - o.Call) }

// StateLost reports whether the reply declared the object's state lost.
func (o Op) StateLost() bool { return o.Outcome == Fail && o.Code == pb.Code_CODE_STATE_LOST }

func (o Op) String() string {
	ret := "∞"
	if o.Return != Infinity {
		ret = fmt.Sprintf("%.3fs", float64(o.Return)/1e9)
	}
	res := o.Outcome.String()
	switch o.Outcome {
	case OK:
		res = string(o.Output)
		if len(res) > 120 {
			res = res[:120] + "…"
		}
	case Fail, Unknown:
		res += " " + wire.CodeName(o.Code)
	}
	final := ""
	if o.Final {
		final = " final"
	}
	return fmt.Sprintf("#%d c%d [%.3fs,%s] %s %s %v → %s {%v}%s", o.ID, o.Client, float64(o.Call)/1e9, ret, o.Object, o.Kind, o.Input, res, o.Fence, final)
}

// Mark is a named point in time of a run (e.g. "fault kill-owner start").
type Mark struct {
	Name string `json:"name"`
	At   int64  `json:"at"`
}

// FaultEvent is one injected fault, from its start to its end (healed).
type FaultEvent struct {
	Kind  string `json:"kind"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
	Err   string `json:"err,omitempty"`
}

// Relocation is one attempt of the relocator.
type Relocation struct {
	Object string `json:"object"`
	// Target asked for ("" = the source chooses).
	Target string `json:"target,omitempty"`
	// Mode says why this target (any, named, back, same-twice, concurrent).
	Mode   string `json:"mode"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	// Result is the status's outcome (completed, aborted, failed, shutdown)
	// or, when the request was refused or never answered, an error class
	// (not-hosted, busy, no-target, unavailable, unknown, error).
	Result       string `json:"result"`
	RelocationID string `json:"relocationId,omitempty"`
	Source       string `json:"source,omitempty"`
	To           string `json:"to,omitempty"`
	Err          string `json:"err,omitempty"`
}

// History is the thread-safe record of a run.
type History struct {
	start time.Time

	mu          sync.Mutex
	ops         []Op
	marks       []Mark
	faults      []FaultEvent
	relocations []Relocation
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Start is when the history started (wall clock and monotonic).
func (h *History) Start() time.Time { return h.start }

// Now is the monotonic time since the history started, in nanoseconds.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records op (its ID is set) and returns the ID.
func (h *History) Add(op Op) int {
	if op.Outcome == Unknown {
		op.Return = Infinity
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops)
	h.ops = append(h.ops, op)
	return op.ID
}

// Ops returns a copy of every operation, in recording order.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Mark records a named point in time.
func (h *History) Mark(name string) {
	at := h.Now()
	h.mu.Lock()
	h.marks = append(h.marks, Mark{Name: name, At: at})
	h.mu.Unlock()
}

// Marks returns the marks.
func (h *History) Marks() []Mark {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Mark(nil), h.marks...)
}

// Fault records an injected fault of a kind, from start to end (times from
// Now); whoever injects faults calls it.
func (h *History) Fault(kind string, start, end int64, err error) {
	ev := FaultEvent{Kind: kind, Start: start, End: end}
	if err != nil {
		ev.Err = err.Error()
	}
	h.mu.Lock()
	h.faults = append(h.faults, ev)
	h.mu.Unlock()
}

// Faults returns the injected faults.
func (h *History) Faults() []FaultEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]FaultEvent(nil), h.faults...)
}

// AddRelocation records a relocation attempt.
func (h *History) AddRelocation(r Relocation) {
	h.mu.Lock()
	h.relocations = append(h.relocations, r)
	h.mu.Unlock()
}

// Dump is the whole history, for the artifacts of a run.
type Dump struct {
	Start       time.Time    `json:"start"`
	Ops         []Op         `json:"ops"`
	Marks       []Mark       `json:"marks"`
	Faults      []FaultEvent `json:"faults"`
	Relocations []Relocation `json:"relocations"`
}

// Dump copies the history.
func (h *History) Dump() Dump {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Dump{Start: h.start, Ops: append([]Op(nil), h.ops...), Marks: append([]Mark(nil), h.marks...),
		Faults: append([]FaultEvent(nil), h.faults...), Relocations: append([]Relocation(nil), h.relocations...)}
}

// Relocations returns the relocation attempts.
func (h *History) Relocations() []Relocation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Relocation(nil), h.relocations...)
}

// DeclaredLoss is a reply that said an object's state was lost: every write
// acknowledged under an older object generation is expected to be gone.
type DeclaredLoss struct {
	Object string
	At     int64 // the reply's return time
	// Generation is the new object generation the reply carried.
	Generation int64
}

// DeclaredLosses lists the StateLost replies per object, by time.
func DeclaredLosses(ops []Op) map[string][]DeclaredLoss {
	out := map[string][]DeclaredLoss{}
	for _, o := range ops {
		if o.StateLost() {
			out[o.Object] = append(out[o.Object], DeclaredLoss{Object: o.Object, At: o.Return, Generation: o.Fence.ObjectGeneration})
		}
	}
	for _, l := range out {
		sort.Slice(l, func(i, j int) bool { return l[i].At < l[j].At })
	}
	return out
}

// byObject groups ops by object, each group in call order.
func byObject(ops []Op) map[string][]Op {
	out := map[string][]Op{}
	for _, o := range ops {
		out[o.Object] = append(out[o.Object], o)
	}
	for _, l := range out {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Call < l[j].Call })
	}
	return out
}

// ---------------------------------------------------------------- callers

// Caller calls objects; *client.Client is one. A Caller is used by one
// sequential stream only, so Fence(object) right after a call is the fence of
// that call's reply.
type Caller interface {
	CallOp(ctx context.Context, op wire.OperationID, object, method string, args [][]byte) (*client.Reply, error)
	Fence(object string) (authority.Fence, bool)
}

var _ Caller = (*client.Client)(nil)

// Stream is one sequential client stream of a workload.
type Stream struct {
	// ID is unique in the run (porcupine's ClientId).
	ID     int
	Caller Caller
	// Timeout bounds one operation; past it the outcome is unknown.
	Timeout time.Duration
}

// opTimeout bounds one operation of s.
func (s Stream) opTimeout() time.Duration {
	if s.Timeout <= 0 {
		return 5 * time.Second
	}
	return s.Timeout
}

// definite are the codes after which a call certainly had no effect.
func definite(c pb.Code) bool {
	switch c {
	case pb.Code_CODE_STATE_LOST, pb.Code_CODE_APPLICATION_ERROR, pb.Code_CODE_INVALID_ARGUMENT,
		pb.Code_CODE_UNKNOWN_METHOD, pb.Code_CODE_UNKNOWN_TYPE, pb.Code_CODE_UNKNOWN_KIND,
		pb.Code_CODE_PAYLOAD_TOO_LARGE, pb.Code_CODE_INVALID_OPERATION_ID, pb.Code_CODE_OPERATION_EXPIRED,
		pb.Code_CODE_PROTOCOL_ERROR, pb.Code_CODE_STATE_TOO_LARGE, pb.Code_CODE_DELETED:
		return true
	}
	return false
}

// fenced are the definite codes whose reply came from the owner with its fence.
func fenced(c pb.Code) bool {
	return c == pb.Code_CODE_STATE_LOST || c == pb.Code_CODE_APPLICATION_ERROR || c == pb.Code_CODE_DELETED
}

// settle records the outcome of a call that returned rep or err.
func settle(rec *Op, rep *client.Reply, err error) {
	rec.Return = rec.End
	if err == nil {
		rec.Outcome, rec.Output, rec.Fence, rec.Replayed = OK, rep.Payload, FenceOf(rep.Fence), rep.Replayed
		return
	}
	rec.Err = err.Error()
	var we *wire.Error
	if errors.As(err, &we) {
		rec.Code = we.Code
	}
	rec.Outcome = Unknown
	if definite(rec.Code) {
		rec.Outcome = Fail
	}
}

// Invoke calls method on object through s with a new operation id, records
// the operation in h and returns it. A call whose outcome is unknown is not
// retried here (the workload decides: its next call on that object is a
// read).
func Invoke(ctx context.Context, s Stream, h *History, workload, object, method string, args ...string) Op {
	return invoke(ctx, s, h, false, workload, object, method, args...)
}

func invoke(ctx context.Context, s Stream, h *History, final bool, workload, object, method string, args ...string) Op {
	return invokeOp(ctx, s, h, final, wire.NewOperationID(), workload, object, method, args...)
}

// invokeOp is invoke with the operation id op (a retry of an operation
// whose outcome is unknown uses its id again).
func invokeOp(ctx context.Context, s Stream, h *History, final bool, op wire.OperationID, workload, object, method string, args ...string) Op {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	// Not cancelled with ctx: an operation in flight when the load stops
	// completes or times out on its own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opTimeout())
	defer cancel()
	rec := Op{Client: s.ID, Workload: workload, Object: object, Kind: method, Input: args, OpID: op.String(), Final: final}
	rec.Call = h.Now()
	rep, err := s.Caller.CallOp(cctx, op, object, method, b)
	rec.End = h.Now()
	settle(&rec, rep, err)
	if rec.Outcome == Fail && fenced(rec.Code) {
		if f, ok := s.Caller.Fence(object); ok {
			rec.Fence = FenceOf(f)
		}
	}
	rec.ID = h.Add(rec)
	if rec.Outcome == Unknown {
		rec.Return = Infinity
	}
	return rec
}
