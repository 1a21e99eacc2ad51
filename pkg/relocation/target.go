package relocation

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// TargetPhase is where a target machine is.
type TargetPhase int

// Target phases.
const (
	TargetNew        TargetPhase = 1 + iota // no PREPARE yet
	TargetAssembling                        // receiving STATE chunks
	TargetRestoring                         // restoring a hidden instance
	TargetReady                             // READY sent; waiting for DATA and CUTOVER
	TargetCommitting                        // commit transaction in flight
	TargetDone
)

func (p TargetPhase) String() string {
	return [...]string{"invalid", "new", "assembling", "restoring", "ready", "committing", "done"}[min(max(int(p), 0), 6)]
}

// Target events.
type (
	// Restored: the hidden instance was restored from the payload (Err: it
	// could not be: a corrupt envelope or state).
	Restored struct{ Err error }
	// GroupRead is the result of ReadGroup.
	GroupRead struct {
		Snapshot record.Snapshot
		Err      error
	}
	// CommitResult is the result of Commit or ResolveCommit.
	CommitResult struct {
		Committed bool
		// Records: the committed records, or the current ones when not committed.
		Records map[string]record.Snapshot
		// Err: uncertain (no answer and no read-back yet).
		Err error
	}
)

func (Restored) event()     {}
func (GroupRead) event()    {}
func (CommitResult) event() {}

// Target actions.
type (
	// Restore decodes the payload and creates hidden (not admitted) instances;
	// requests that reach the target for them now wait. Result: Restored.
	Restore struct{ Payload []byte }
	// ReadGroup reads the record of the group an Actor Join joins (this
	// node's, compared by the commit); result: GroupRead.
	ReadGroup struct{ Group keyspace.Object }
	// Commit runs the commit transaction for Participants (their expected
	// records) to this node; result: CommitResult.
	Commit struct {
		RelocationID wire.RelocationID
		Participants []record.Snapshot
		// Join, for an Actor Join: the group's record as ReadGroup read it
		// (this node's); the same transaction writes the membership and
		// compares its store version.
		Join *record.Snapshot
		// Bulk: a bulk unit's key, compared at the revision read
		// (target_bulk.go).
		Bulk *BulkRef
	}
	// ResolveCommit reads back an uncertain commit; result: CommitResult.
	ResolveCommit struct {
		RelocationID wire.RelocationID
		Participants []record.Snapshot
		Join         *record.Snapshot
		Bulk         *BulkRef
	}
	// Admit opens the object on the target, in this order: the captured
	// requests, then Data (in sequence order) at the head of the mailbox, each
	// reply relayed to its requester; then waiting requests; timers resume;
	// admission opens. Committed holds the committed records.
	Admit struct {
		Committed map[string]record.Snapshot
		Data      []*pb.CallRequest
	}
	// Discard drops the hidden instances; waiting requests are redirected.
	Discard struct{}
	// Recycle: the machine no longer reads or keeps these received chunks'
	// data (copied into the payload); the driver may reuse their buffers.
	Recycle struct{ Data [][]byte }
)

func (Restore) action()       {}
func (ReadGroup) action()     {}
func (Commit) action()        {}
func (ResolveCommit) action() {}
func (Admit) action()         {}
func (Discard) action()       {}
func (Recycle) action()       {}

// TargetConfig is what a target machine checks PREPARE against.
type TargetConfig struct {
	Self          record.OwnerRef
	SelfRoutingID wire.RoutingID
	AppVersion    string
	// FallbackMs: how long after READY the target waits for CUTOVER before
	// committing on its own (unless it is draining).
	FallbackMs int64
	// Alloc makes the buffer a payload of several chunks is assembled in
	// (nil: make). The node's prefaults it: the copies of a fresh buffer of
	// many megabytes otherwise take a page fault every 4 KiB.
	Alloc func(n int) []byte
	// MaxDeadlineMs bounds how far ahead of the target's clock a PREPARE's
	// deadline may lie (0: unbounded): a stage lives until its deadline,
	// so a peer that announces a far one and stops sending would hold the
	// stage's memory that long. Beyond it: CODE_RESOURCE_EXHAUSTED.
	MaxDeadlineMs int64
}

// Target is the target side of one relocation attempt: a pure state machine.
type Target struct {
	cfg          TargetConfig
	phase        TargetPhase
	id           wire.RelocationID
	fingerprint  [32]byte
	prepare      *pb.Prepare
	participants []record.Snapshot
	join         keyspace.Object // Actor Join: the group joined (zero: none)
	asm          *Assembly
	// base: a pre-copy's base, assembled and checked, until SEALED
	// (target_precopy.go); sealed: SEALED came, at sealedUs (its seal
	// time).
	base       *Assembly
	sealed     bool
	sealedUs   int64
	readyAtMs  int64
	nowMs      int64
	data       []*pb.CallRequest
	dataCRC    uint32
	lastAnswer *pb.RelocationFrame
	outcome    Outcome
	code       pb.Code
	msg        string
	cutover    bool
	// early: an eager cutover's CUTOVER that came before the restore ended
	// (checked and acted on then); earlyErr: a DATA gap seen then.
	early    *pb.Cutover
	earlyErr string
	// draining is sticky: once the node drains (or stops) no stage finishes
	// restoring and no cutover is self-ordered (docs/seed-bugs.md bugs 11-12).
	draining bool
	// resolving: the last commit was uncertain and is being read back.
	resolving bool
	// joinSeen: the group's record ReadGroup read (Actor Join).
	joinSeen *record.Snapshot
	// bulk: a bulk unit's key, as checked (target_bulk.go).
	bulk *BulkRef
	// retry is an action to take again at retryAt (a read-back after an
	// uncertain commit, a group read that failed), after a pause: etcd
	// just failed to answer.
	retry   Action
	retryAt int64
}

// RetryPauseMs is how long a target waits before it reads back an uncertain
// commit, or reads a join's group again.
const RetryPauseMs = 50

// NewTarget returns a machine waiting for PREPARE.
func NewTarget(cfg TargetConfig) *Target { return &Target{cfg: cfg, phase: TargetNew} }

// Phase of the machine.
func (t *Target) Phase() TargetPhase { return t.phase }

// Outcome once TargetDone.
func (t *Target) Outcome() Outcome { return t.outcome }

// ID of the relocation (zero before PREPARE).
func (t *Target) ID() wire.RelocationID { return t.id }

// Data is the DATA requests received so far, in sequence order.
func (t *Target) Data() []*pb.CallRequest { return t.data }

// Prepare is the accepted PREPARE (nil before).
func (t *Target) Prepare() *pb.Prepare { return t.prepare }

// Fingerprint of the accepted PREPARE: SHA-256 of its canonical bytes.
func (t *Target) Fingerprint() [32]byte { return t.fingerprint }

func (t *Target) fail(code pb.Code, msg string, discard bool) []Action {
	var out []Action
	if discard {
		out = append(out, Discard{})
	}
	f := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: t.idBytes(), Code: code, Message: msg}}}
	t.lastAnswer = f
	return append(out, Send{Frame: f}, t.finish(outcomeOfFailure(code), code, msg))
}

func outcomeOfFailure(code pb.Code) Outcome {
	if code == pb.Code_CODE_SHUTTING_DOWN {
		return Shutdown
	}
	return Failed
}

func (t *Target) finish(o Outcome, code pb.Code, msg string) Action {
	t.phase = TargetDone
	if t.outcome == 0 {
		t.outcome, t.code, t.msg = o, code, msg
	}
	return Finish{Outcome: t.outcome, Code: t.code, Message: t.msg}
}

// WakeAtMs is the earliest Unix ms at which a Tick could make the machine
// act (0: none is due: the next step comes from an event). A driver may
// deliver Ticks only then; drain state then arrives with that Tick.
func (t *Target) WakeAtMs() int64 {
	switch t.phase {
	case TargetAssembling:
		return t.prepare.GetDeadlineUnixMs()
	case TargetReady:
		if t.draining {
			return t.prepare.GetDeadlineUnixMs() + t.cfg.FallbackMs
		}
		return t.readyAtMs + t.cfg.FallbackMs
	case TargetCommitting:
		if t.retry != nil {
			return t.retryAt
		}
	}
	return 0
}

// LastAnswer is the last READY/FAILED/OUTCOME sent (repeated for an identical PREPARE).
func (t *Target) LastAnswer() *pb.RelocationFrame { return t.lastAnswer }

// Step takes one event and returns the actions to carry out, in order.
func (t *Target) Step(ev Event) ([]Action, error) {
	switch e := ev.(type) {
	case Tick:
		t.nowMs = e.NowMs
		t.draining = t.draining || e.Draining
	case Stop:
		t.draining = true
	case PrepareEvent:
		t.nowMs = e.NowMs
		t.draining = t.draining || e.Draining
		if t.phase != TargetNew {
			return t.repeatedPrepare(e.Prepare)
		}
		return t.onPrepare(e)
	}
	switch t.phase {
	case TargetNew:
		switch e := ev.(type) {
		case Received:
			switch e.Frame.GetFrame().(type) {
			case *pb.RelocationFrame_Chunk, *pb.RelocationFrame_Data, *pb.RelocationFrame_Cutover:
				// Its PREPARE was lost: a stray chunk, or an
				// eager cutover's DATA or CUTOVER, ignored.
				return nil, nil
			}
			return nil, fmt.Errorf("%w: %s before PREPARE", ErrProtocol, frameName(e.Frame))
		case Tick, StreamBroken, Stop:
			return nil, nil
		}
	case TargetAssembling:
		switch e := ev.(type) {
		case Received:
			if t.eagerFrame(e.Frame) {
				return nil, nil
			}
			if t.prepare.GetPrecopy() {
				return t.onPrecopyFrame(e.Frame) // target_precopy.go
			}
			c, ok := e.Frame.GetFrame().(*pb.RelocationFrame_Chunk)
			if !ok {
				return t.fail(pb.Code_CODE_PROTOCOL_ERROR, frameName(e.Frame)+" while assembling", false), nil
			}
			return t.onChunk(c.Chunk)
		case StreamBroken:
			return []Action{t.finish(Failed, pb.Code_CODE_UNAVAILABLE, "source stream broke before READY")}, nil
		case Tick:
			if t.draining {
				return t.fail(pb.Code_CODE_SHUTTING_DOWN, "target shutting down during assembly", false), nil
			}
			if t.nowMs >= t.prepare.GetDeadlineUnixMs() {
				return t.fail(pb.Code_CODE_DEADLINE_EXCEEDED, "deadline passed during assembly", false), nil
			}
			return nil, nil
		case Stop:
			return t.fail(pb.Code_CODE_SHUTTING_DOWN, "target stopping", false), nil
		}
	case TargetRestoring:
		switch e := ev.(type) {
		case Restored:
			if e.Err != nil {
				code := pb.Code_CODE_DATA_LOST
				if errors.Is(e.Err, ErrProtocol) {
					code = pb.Code_CODE_PROTOCOL_ERROR
				}
				var re *RefusedError
				if errors.As(e.Err, &re) {
					return t.fail(re.Code, "refused: "+re.Message, true), nil
				}
				return t.fail(code, "restore: "+e.Err.Error(), true), nil
			}
			if t.draining { // docs/seed-bugs.md bug 12: no staging once drain began
				return t.fail(pb.Code_CODE_SHUTTING_DOWN, "target shutting down during restore", true), nil
			}
			if t.nowMs >= t.prepare.GetDeadlineUnixMs() {
				return t.fail(pb.Code_CODE_DEADLINE_EXCEEDED, "READY would be past the deadline", true), nil
			}
			if t.earlyErr != "" {
				return t.fail(pb.Code_CODE_PROTOCOL_ERROR, t.earlyErr, true), nil
			}
			t.phase = TargetReady
			t.readyAtMs = t.nowMs
			if c := t.early; c != nil {
				// Eager cutover: CUTOVER came during the assembly or the
				// restore; commit now, no READY to wait on.
				t.early = nil
				return t.onCutover(c)
			}
			f := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Ready{Ready: &pb.Ready{RelocationId: t.idBytes()}}}
			t.lastAnswer = f
			return []Action{Send{Frame: f}}, nil
		case Received:
			if _, ok := e.Frame.GetFrame().(*pb.RelocationFrame_Chunk); ok {
				return nil, nil // a duplicate of a chunk already assembled
			}
			if t.repeatedSealed(e.Frame) {
				return nil, nil
			}
			if t.eagerFrame(e.Frame) {
				return nil, nil
			}
			return nil, fmt.Errorf("%w: %s before READY", ErrProtocol, frameName(e.Frame))
		case Tick, StreamBroken, Stop:
			return nil, nil // Restored comes next
		}
	case TargetReady:
		switch e := ev.(type) {
		case Received:
			switch f := e.Frame.GetFrame().(type) {
			case *pb.RelocationFrame_Data:
				return t.onData(f.Data)
			case *pb.RelocationFrame_Cutover:
				return t.onCutover(f.Cutover)
			case *pb.RelocationFrame_Chunk:
				return nil, nil // a late duplicate chunk
			}
			if t.repeatedSealed(e.Frame) {
				return nil, nil
			}
			return nil, fmt.Errorf("%w: %s after READY", ErrProtocol, frameName(e.Frame))
		case Tick:
			// doc.go §5: without CUTOVER the target commits on its own after
			// the fallback wait — unless it is draining (a sealed target
			// never self-orders a cutover); then it gives up at the deadline.
			if !t.draining && t.nowMs >= t.readyAtMs+t.cfg.FallbackMs {
				return t.commit(), nil
			}
			if t.draining && t.nowMs >= t.prepare.GetDeadlineUnixMs()+t.cfg.FallbackMs {
				return t.fail(pb.Code_CODE_SHUTTING_DOWN, "draining target gave up waiting for CUTOVER", true), nil
			}
			return nil, nil
		case Stop:
			// Nothing is committed: ending now is safe (the source preserves
			// at its deadline), and a stopping node must not take the object.
			return t.fail(pb.Code_CODE_SHUTTING_DOWN, "target stopping before the commit", true), nil
		case StreamBroken:
			return nil, nil // the fallback (or the deadline when draining) decides
		}
	case TargetCommitting:
		switch e := ev.(type) {
		case CommitResult:
			return t.onCommit(e), nil
		case GroupRead:
			return t.onGroupRead(e), nil
		case Tick:
			if t.retry != nil && t.nowMs >= t.retryAt {
				a := t.retry
				t.retry = nil
				return []Action{a}, nil
			}
			return nil, nil
		case Stop:
			if e.Hard {
				// The node goes away with the commit in flight or
				// uncertain: whatever etcd holds, this node serves
				// nothing more (a commit that landed names an owner
				// whose lease ends: the object is recovered).
				return t.fail(pb.Code_CODE_SHUTTING_DOWN, "target stopped with its commit unresolved", true), nil
			}
			return nil, nil // a commit in flight is resolved first
		case Received, StreamBroken:
			return nil, nil
		}
	case TargetDone:
		switch ev.(type) {
		case Received, Tick, StreamBroken, Stop, Restored, CommitResult, GroupRead:
			return nil, nil // late frames for a finished stage are ignored
		}
	}
	return nil, invalid(t.phase, ev)
}

func (t *Target) onChunk(c *pb.StateChunk) ([]Action, error) {
	if string(c.GetRelocationId()) != string(t.id[:]) {
		return nil, nil // a stray chunk of another relocation: ignored
	}
	var err error
	if c.Crc32C != nil {
		err = t.asm.AddSummed(c.GetIndex(), c.GetData(), c.GetCrc32C())
	} else {
		err = t.asm.Add(c.GetIndex(), c.GetData())
	}
	if err != nil {
		if errors.Is(err, ErrDuplicateChunk) {
			return nil, nil
		}
		return t.fail(pb.Code_CODE_DATA_LOST, err.Error(), false), nil
	}
	var out []Action
	if spent := t.asm.Spent(); len(spent) > 0 {
		out = append(out, Recycle{Data: spent})
	}
	if !t.asm.Complete() {
		return out, nil
	}
	more, err := t.assembled()
	return append(out, more...), err
}

// assembled: every chunk arrived; restore the payload if its CRC32C
// matches (a pre-copy's base is kept for SEALED instead).
func (t *Target) assembled() ([]Action, error) {
	payload, err := t.asm.Payload()
	if err != nil {
		return t.fail(pb.Code_CODE_DATA_LOST, err.Error(), false), nil
	}
	if t.prepare.GetPrecopy() && !t.sealed {
		return t.precopied(), nil
	}
	t.asm = nil
	t.phase = TargetRestoring
	return []Action{Restore{Payload: payload}}, nil
}

// idBytes is the id for a frame, in bytes of its own: a slice of t.id
// would keep the whole machine (its received payload among it) reachable
// from any frame the node keeps, such as a tombstone's answer.
func (t *Target) idBytes() []byte { return bytes.Clone(t.id[:]) }
