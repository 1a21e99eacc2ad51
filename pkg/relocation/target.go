package relocation

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

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
	}
	// ResolveCommit reads back an uncertain commit; result: CommitResult.
	ResolveCommit struct {
		RelocationID wire.RelocationID
		Participants []record.Snapshot
		Join         *record.Snapshot
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

// Fingerprint is the SHA-256 of a PREPARE's deterministic protobuf encoding.
func Fingerprint(p *pb.Prepare) [32]byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}

// PrepareEvent is a PREPARE with the target's local facts at arrival.
type PrepareEvent struct {
	Prepare  *pb.Prepare
	NowMs    int64
	Draining bool
	// Busy: a bound of the node on incoming stages was reached (the
	// driver's count of stages, per peer and in all, or of the bytes they
	// announce); it names the bound. Refused: CODE_RESOURCE_EXHAUSTED.
	Busy string
	// Duplicate: a stage of the same relocation is in flight on this node
	// (on another stream). Refused: CODE_PROTOCOL_ERROR.
	Duplicate bool
	// Peer is the owner id the stream's verified certificate names (mutual
	// TLS; empty without): PREPARE must come from its coordinator, the
	// source whose intent etcd holds. Otherwise CODE_PERMISSION_DENIED.
	Peer string
}

func (PrepareEvent) event() {}

func (t *Target) fail(code pb.Code, msg string, discard bool) []Action {
	var out []Action
	if discard {
		out = append(out, Discard{})
	}
	f := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: t.id[:], Code: code, Message: msg}}}
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
			f := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Ready{Ready: &pb.Ready{RelocationId: t.id[:]}}}
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

func (t *Target) onPrepare(e PrepareEvent) ([]Action, error) {
	p := e.Prepare
	id, err := wire.ParseRelocationIDBytes(p.GetRelocationId())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	t.id, t.prepare, t.fingerprint = id, p, Fingerprint(p)
	t.phase = TargetAssembling
	// design.md §4 step 4: a node that is shutting down refuses before staging anything.
	if e.Draining {
		return t.fail(pb.Code_CODE_SHUTTING_DOWN, "target is draining", false), nil
	}
	if e.Duplicate {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, "a stage of this relocation is in flight on this node", false), nil
	}
	if e.Busy != "" {
		return t.fail(pb.Code_CODE_RESOURCE_EXHAUSTED, "target busy: "+e.Busy, false), nil
	}
	if e.Peer != "" && e.Peer != p.GetCoordinator().GetOwnerId() {
		return t.fail(pb.Code_CODE_PERMISSION_DENIED, fmt.Sprintf("PREPARE from node %s names coordinator %s", e.Peer, p.GetCoordinator().GetOwnerId()), false), nil
	}
	if p.GetVersion() != wire.Version {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, fmt.Sprintf("wire version %d", p.GetVersion()), false), nil
	}
	tf := p.GetTarget()
	if tf.GetOwnerId() != t.cfg.Self.ID || tf.GetOwnerGeneration() != t.cfg.Self.Generation || !t.cfg.SelfRoutingID.Equal(tf.GetRoutingId()) {
		return t.fail(pb.Code_CODE_STALE_FENCE, fmt.Sprintf("target fence %s@%d does not match this owner %s", tf.GetOwnerId(), tf.GetOwnerGeneration(), t.cfg.Self), false), nil
	}
	if p.GetApplicationVersion() != t.cfg.AppVersion {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, fmt.Sprintf("application version %q, this node runs %q", p.GetApplicationVersion(), t.cfg.AppVersion), false), nil
	}
	if e.NowMs >= p.GetDeadlineUnixMs() {
		return t.fail(pb.Code_CODE_DEADLINE_EXCEEDED, "PREPARE arrived after its deadline", false), nil
	}
	if m := t.cfg.MaxDeadlineMs; m > 0 && p.GetDeadlineUnixMs()-e.NowMs > m {
		return t.fail(pb.Code_CODE_RESOURCE_EXHAUSTED, fmt.Sprintf("deadline %d ms ahead, this node allows at most %d", p.GetDeadlineUnixMs()-e.NowMs, m), false), nil
	}
	parts, err := participants(p)
	if err == nil {
		err = t.checkIntent(p, parts)
	}
	if err == nil {
		t.join, err = checkGroups(p, parts)
	}
	if err != nil {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, err.Error(), false), nil
	}
	t.participants = parts
	m := Manifest{Length: p.GetPayloadLength(), Chunks: p.GetChunkCount(), CRC32C: p.GetCrc32C()}
	switch {
	case p.GetPrecopy() && (p.GetEagerCutover() || p.GetChunkSize() == 0):
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, "a pre-copy needs a chunk size and no eager cutover", false), nil
	case !p.GetPrecopy() && p.GetChunkSize() != 0:
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, "a chunk size without pre-copy", false), nil
	case p.GetPrecopy():
		m.Block = uint64(p.GetChunkSize())
	}
	asm, err := NewAssembly(m)
	if err != nil {
		return t.fail(pb.Code_CODE_DATA_LOST, err.Error(), false), nil
	}
	asm.alloc = t.cfg.Alloc
	t.asm = asm
	return nil, nil
}

// participants turns PREPARE's participants into the expected records the
// commit compares: the coordinator's owner and the captured generations.
func participants(p *pb.Prepare) ([]record.Snapshot, error) {
	if len(p.GetParticipants()) == 0 {
		return nil, fmt.Errorf("%w: no participants", ErrProtocol)
	}
	c := p.GetCoordinator()
	out := make([]record.Snapshot, 0, len(p.GetParticipants()))
	for _, pp := range p.GetParticipants() {
		obj, err := keyspace.ParseObject(pp.GetObject())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		if pp.GetStoreVersion() <= 0 || pp.GetObjectGeneration() <= 0 || pp.GetAuthorityGeneration() <= 0 {
			return nil, fmt.Errorf("%w: participant %s without generations", ErrProtocol, obj)
		}
		rec := record.Record{
			Kind: obj.Kind, Type: pp.GetType(), ObjectGeneration: pp.GetObjectGeneration(), OwnerGeneration: pp.GetAuthorityGeneration(),
			Owner: record.OwnerRef{ID: c.GetOwnerId(), Generation: c.GetOwnerGeneration()},
		}
		if b := pp.GetRecord(); len(b) > 0 {
			full, err := record.DecodeRecord(b)
			if err != nil {
				return nil, fmt.Errorf("%w: participant %s: %v", ErrProtocol, obj, err)
			}
			if full.Kind != rec.Kind || full.ObjectGeneration != rec.ObjectGeneration || full.OwnerGeneration != rec.OwnerGeneration || full.Owner != rec.Owner {
				return nil, fmt.Errorf("%w: participant %s: record disagrees with its fence", ErrProtocol, obj)
			}
			rec = full
		}
		out = append(out, record.Snapshot{Object: obj, StoreVersion: pp.GetStoreVersion(), Record: rec})
	}
	return out, nil
}

// checkIntent refuses a PREPARE that is not bound to its intent (docs/design.md
// §3), before anything is staged: every participant's record must carry
// this relocation's intent naming this target, its node and the PREPARE's
// deadline, owned by the coordinator at its node, and the intent's nonce
// hash must be the hash of PREPARE's nonce. The records come from the peer;
// the commit compares their exact bytes in etcd, so what is checked here is
// what etcd holds, or nothing commits.
func (t *Target) checkIntent(p *pb.Prepare, parts []record.Snapshot) error {
	c := p.GetCoordinator()
	if len(p.GetNonce()) != wire.NonceLen {
		return fmt.Errorf("%w: PREPARE nonce of %d bytes, want %d", ErrProtocol, len(p.GetNonce()), wire.NonceLen)
	}
	nonce := record.HashNonce(p.GetNonce())
	for _, pp := range parts {
		r := pp.Record
		if err := r.IntendedFor(t.id.String(), t.cfg.Self); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrProtocol, pp.Object, err)
		}
		in := r.Intent
		switch {
		case !t.cfg.SelfRoutingID.Equal(hexBytes(in.TargetNode.RoutingID)):
			return fmt.Errorf("%w: %s: the intent names target node %s, this node is %s", ErrProtocol, pp.Object, in.TargetNode.RoutingID, t.cfg.SelfRoutingID.Hex())
		case in.DeadlineMs != p.GetDeadlineUnixMs():
			return fmt.Errorf("%w: %s: the intent's deadline is %d, PREPARE says %d", ErrProtocol, pp.Object, in.DeadlineMs, p.GetDeadlineUnixMs())
		case in.NonceHash != nonce:
			return fmt.Errorf("%w: %s: PREPARE's nonce does not match the intent", ErrProtocol, pp.Object)
		case hexString(c.GetRoutingId()) != r.Node.RoutingID:
			return fmt.Errorf("%w: %s: the record names node %s, the coordinator is %x", ErrProtocol, pp.Object, r.Node.RoutingID, c.GetRoutingId())
		}
	}
	return nil
}

// repeatedPrepare: same bytes → the same answer; other bytes under the same
// identity → protocol error, nothing changes.
func (t *Target) repeatedPrepare(p *pb.Prepare) ([]Action, error) {
	if Fingerprint(p) != t.fingerprint {
		f := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: p.GetRelocationId(),
			Code: pb.Code_CODE_PROTOCOL_ERROR, Message: "PREPARE repeated with other bytes"}}}
		return []Action{Send{Frame: f}}, nil
	}
	if t.lastAnswer != nil {
		return []Action{Send{Frame: t.lastAnswer}}, nil
	}
	return nil, nil // still assembling or restoring: the answer comes
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
