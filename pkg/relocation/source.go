package relocation

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// SourcePhase is where a source machine is (doc.go draws them).
type SourcePhase int

// Source phases.
const (
	SourceIntent     SourcePhase = 1 + iota // writing the intent; the object serves
	SourcePrecopying                        // pre-copy: the base streams; the object serves
	SourceCapturing                         // sealed, capturing state and queue
	SourceBulkIntent                        // a bulk unit, captured: waiting for its bulk's key (source_bulk.go)
	SourcePreparing                         // PREPARE and chunks sent, waiting for READY
	SourceCutover                           // READY received: sending DATA and CUTOVER
	SourceSettling                          // reading etcd for the outcome
	SourcePreserving                        // preserve in flight
	SourceDone
)

func (p SourcePhase) String() string {
	return [...]string{"invalid", "intent", "precopying", "capturing", "bulk-intent", "preparing", "cutover", "settling", "preserving", "done"}[min(max(int(p), 0), 9)]
}

// SourceConfig is everything a source machine decides from.
type SourceConfig struct {
	ID wire.RelocationID
	// Object is the record the source owns now (the primary participant).
	Object record.Snapshot
	// Self is the source owner; SelfRoutingID its routing id.
	Self          record.OwnerRef
	SelfRoutingID wire.RoutingID
	Target        TargetRef
	AppVersion    string
	// DeadlineMs is the Unix ms by which the relocation must have committed;
	// after it the source preserves.
	DeadlineMs int64
	// ChunkSize of STATE chunks in bytes.
	ChunkSize int
	// Members are the other participants, owned by Self too: a group's
	// members (Object is then the group record, the primary). They move in
	// the same relocation, with one intent, one commit and one preserve
	// transaction over every participant (groups.go).
	Members []record.Snapshot
	// JoinGroup, for an Actor Join (docs/design.md §6): the group, owned
	// by the target, that the actor joins; the target's commit writes the
	// membership. Object is then the actor and Members is empty.
	JoinGroup string
	// Nonce is this relocation's secret (wire.NewNonce): the intent holds
	// its hash, PREPARE carries it, and nothing else does.
	Nonce []byte
	// EagerMaxBytes: a payload of at most this many bytes (and one chunk)
	// moves with an eager cutover (PREPARE, STATE, DATA and CUTOVER sent at
	// once, without waiting for READY: one hop fewer each way); 0: never.
	// Not for an Actor Join, whose caller is answered at READY.
	EagerMaxBytes int
	// PrecopyMinBytes: a payload of at least this many bytes moves with
	// pre-copy (precopy.go): its bulk streams before the seal; 0 or
	// less: never. StateBytes is the state's size as the node last saw it
	// (< 0: unknown, no pre-copy); the snapshot decides in the end (a
	// state that shrank below PrecopyMinBytes is sealed as usual).
	PrecopyMinBytes int
	StateBytes      int
	// BulkIntent: a unit of a bulk move under the one-write rule
	// (source_bulk.go): one actor outside any group, no pre-copy; its
	// intent goes into its bulk's key, which the driver writes for every
	// unit of the bulk, not into its record.
	BulkIntent bool
}

// Source is the source side of one relocation: a pure state machine.
type Source struct {
	cfg      SourceConfig
	phase    SourcePhase
	seen     record.Snapshot // the record after the intent
	manifest Manifest
	prepare  *pb.Prepare
	ready    bool              // READY received: the point of no return
	boundary int               // DATA requests sent
	members  []record.Snapshot // the other participants as last written or read
	applied  int
	st       settleState // source_settle.go
	code     pb.Code
	msg      string
	outcome  Outcome
	nowMs    int64
	// aborting: abort was called, the object is on its way back to the
	// source; a read that shows the record still ours is preserved again at
	// once instead of waiting for the deadline.
	aborting bool
	// base: a pre-copy's base and its manifest, from the snapshot until
	// the seal's delta was planned.
	base         [][]byte
	baseManifest Manifest
	// refused: the FAILED a pre-copy's target sent while the seal ran.
	refused *pb.Failed
	// segs: a bulk unit's captured payload, until its bulk's key is written.
	segs [][]byte
}

// NewSource returns a machine in SourceIntent.
func NewSource(cfg SourceConfig) *Source {
	return &Source{cfg: cfg, phase: SourceIntent, members: cfg.Members}
}

// Phase of the machine.
func (s *Source) Phase() SourcePhase { return s.phase }

// Outcome once SourceDone (0 before).
func (s *Source) Outcome() Outcome { return s.outcome }

// ReadyReceived reports whether the point of no return was passed.
func (s *Source) ReadyReceived() bool { return s.ready }

// ID of the relocation.
func (s *Source) ID() wire.RelocationID { return s.cfg.ID }

// Watching reports whether the machine wants the primary's record's changes
// (Observed): only while settling does a change decide anything, so a
// driver may skip the cache's changes at other times.
func (s *Source) Watching() bool { return s.phase == SourceSettling }

// Prepare is the PREPARE the machine sent (nil before capture).
func (s *Source) Prepare() *pb.Prepare { return s.prepare }

// Start returns the first actions: write the intent (a bulk unit's:
// seal).
func (s *Source) Start() []Action {
	if s.cfg.BulkIntent {
		return s.startBulk()
	}
	return []Action{WriteIntent{Seen: s.cfg.Object, Members: s.cfg.Members,
		Intent: record.Intent{RelocationID: s.cfg.ID.String(), Target: s.cfg.Target.Owner, TargetNode: s.cfg.Target.Node,
			DeadlineMs: s.cfg.DeadlineMs, NonceHash: record.HashNonce(s.cfg.Nonce)},
	}}
}

func (s *Source) finish(o Outcome, code pb.Code, msg string) Action {
	s.phase = SourceDone
	if s.outcome == 0 {
		s.outcome, s.code, s.msg = o, code, msg
	}
	return Finish{Outcome: s.outcome, Code: s.code, Message: s.msg}
}

// abort starts the way back to the source: preserve first (so a target that
// got PREPARE can never commit afterwards), then reopen.
func (s *Source) abort(code pb.Code, msg string) []Action {
	if !s.aborting { // a repeated preserve keeps the first reason
		s.code, s.msg = code, msg
	}
	s.aborting = true
	s.phase = SourcePreserving
	return []Action{Preserve{Seen: s.seen, Members: s.members}}
}

// Step takes one event and returns the actions to carry out, in order.
func (s *Source) Step(ev Event) ([]Action, error) {
	if t, ok := ev.(Tick); ok {
		s.nowMs = t.NowMs
	}
	switch s.phase {
	case SourceIntent:
		switch e := ev.(type) {
		case IntentResult:
			// Nothing is sealed yet: the object still serves here. When the
			// source still owns it the relocation is aborted (Admission
			// stays AdmitServe), not failed. An uncertain intent that did
			// land names no PREPARE, so no target can commit on it, and the
			// next relocation's intent overwrites it.
			if e.Err != nil {
				// A store that refuses writes for want of space (etcd's
				// NOSPACE, resource_exhausted) wrote nothing: the driver read
				// it back. Its own reason, not an uncertainty.
				if wire.CodeOf(e.Err) == pb.Code_CODE_RESOURCE_EXHAUSTED {
					return []Action{s.finish(Aborted, pb.Code_CODE_RESOURCE_EXHAUSTED, "intent not written: "+e.Err.Error())}, nil
				}
				return []Action{s.finish(Aborted, pb.Code_CODE_UNAVAILABLE, "intent uncertain: "+e.Err.Error())}, nil
			}
			if !e.Result.Written {
				if s.stillOurs(e.Result) {
					return []Action{s.finish(Aborted, pb.Code_CODE_STALE_FENCE, "intent not written: the record changed before the intent")}, nil
				}
				return []Action{s.finish(Failed, pb.Code_CODE_UNAVAILABLE, "intent not written: the record is no longer this owner's")}, nil
			}
			s.seen = e.Result.Snapshot
			s.members = s.updated(e.Result.Members)
			if s.precopy() {
				s.phase = SourcePrecopying
				return []Action{Snapshot{Participants: s.Participants(), Align: s.precopyChunk(), Room: PrecopyRoom}}, nil
			}
			s.phase = SourceCapturing
			return []Action{Seal{Participants: s.Participants()}}, nil
		case Tick, Observed:
			return nil, nil
		case StreamBroken:
			// The stream is opened before Start (doc.go, driver duty 1) and
			// may break before PREPARE: nothing is sealed yet; sending
			// PREPARE will fail and abort before READY.
			return nil, nil
		case Stop:
			return []Action{s.finish(Shutdown, pb.Code_CODE_SHUTTING_DOWN, "stopped before the seal")}, nil
		}
	case SourcePrecopying:
		return s.stepPrecopying(ev) // source_precopy.go
	case SourceCapturing:
		switch e := ev.(type) {
		case Captured:
			switch {
			case e.Err != nil && s.cfg.BulkIntent:
				return s.giveUpBulk(pb.Code_CODE_INTERNAL, "capture failed: "+e.Err.Error()), nil // nothing was written
			case e.Err != nil:
				return s.abort(pb.Code_CODE_INTERNAL, "capture failed: "+e.Err.Error()), nil
			}
			segs := e.Segments
			if segs == nil {
				segs = [][]byte{e.Payload}
			}
			if s.refused != nil { // a pre-copy's target gave up while the seal ran
				return s.abort(s.refused.GetCode(), "target refused: "+s.refused.GetMessage()), nil
			}
			if s.base != nil {
				return s.sealedDelta(segs, e.SealedUnixUs), nil
			}
			// The seal's time is the freshest the machine has heard (no
			// Tick comes between the driver's results): settling times its
			// first read from it after an eager cutover.
			s.nowMs = max(s.nowMs, e.SealedUnixUs/1000)
			s.manifest = PlanSegments(segs, s.cfg.ChunkSize)
			s.prepare = s.buildPrepare()
			s.prepare.SealedUnixUs = e.SealedUnixUs
			s.prepare.EagerCutover = s.eager()
			if s.cfg.BulkIntent {
				return s.awaitBulk(segs), nil
			}
			return s.sendPrepare(segs), nil
		case Received:
			return s.duringPrecopySeal(e.Frame) // source_precopy.go
		case Tick, StreamBroken, Observed:
			return nil, nil // the capture result comes next
		case Stop:
			return nil, nil
		}
	case SourceBulkIntent:
		return s.stepBulkIntent(ev) // source_bulk.go
	case SourcePreparing:
		switch e := ev.(type) {
		case Received:
			switch f := e.Frame.GetFrame().(type) {
			case *pb.RelocationFrame_Ready:
				if !s.sameID(f.Ready.GetRelocationId()) {
					return nil, fmt.Errorf("%w: READY for another relocation", ErrProtocol)
				}
				s.ready = true
				s.phase = SourceCutover
				return []Action{ReadyPassed{}, SendBoundary{}}, nil
			case *pb.RelocationFrame_Failed:
				if !s.sameID(f.Failed.GetRelocationId()) {
					return nil, fmt.Errorf("%w: FAILED for another relocation", ErrProtocol)
				}
				return s.abort(f.Failed.GetCode(), "target refused: "+f.Failed.GetMessage()), nil
			case *pb.RelocationFrame_Precopied:
				return nil, nil // a repeated answer to a pre-copy's PREPARE
			case *pb.RelocationFrame_Outcome:
				// READY was lost and the target committed after its fallback
				// wait. The store decides, as always; nothing went as DATA.
				if !s.sameID(f.Outcome.GetRelocationId()) {
					return nil, fmt.Errorf("%w: OUTCOME for another relocation", ErrProtocol)
				}
				s.noteOutcome(f.Outcome)
				return s.startSettling(true), nil
			}
			return nil, fmt.Errorf("%w: %s before READY", ErrProtocol, frameName(e.Frame))
		case StreamBroken:
			return s.abort(pb.Code_CODE_UNAVAILABLE, "stream to the target broke before READY"), nil
		case Tick:
			if e.NowMs >= s.cfg.DeadlineMs {
				return s.abort(pb.Code_CODE_DEADLINE_EXCEEDED, "no READY before the deadline"), nil
			}
			return nil, nil
		case Stop:
			return s.abort(pb.Code_CODE_SHUTTING_DOWN, "source stopping before READY"), nil
		case Observed:
			return nil, nil // nothing is decided before READY but through the preserve
		}
	case SourceCutover:
		switch e := ev.(type) {
		case BoundarySent:
			s.boundary = e.Count
			return s.startSettling(false), nil
		case Received:
			if o, ok := e.Frame.GetFrame().(*pb.RelocationFrame_Outcome); ok && s.sameID(o.Outcome.GetRelocationId()) {
				s.noteOutcome(o.Outcome) // its count of DATA is kept for the drop
			}
			return nil, nil // BoundarySent comes next; settle decides
		case Tick, StreamBroken, Stop, Observed:
			return nil, nil
		}
	case SourceSettling:
		return s.stepSettling(ev) // source_settle.go
	case SourcePreserving:
		switch e := ev.(type) {
		case PreserveResult:
			return s.preserved(e)
		case Received:
			if o, ok := e.Frame.GetFrame().(*pb.RelocationFrame_Outcome); ok && s.sameID(o.Outcome.GetRelocationId()) {
				s.noteOutcome(o.Outcome)
			}
			return nil, nil
		case SettleResult:
			s.st.reading = false // a read from before the preserve: the preserve decides
			return nil, nil
		case Tick, StreamBroken, Stop, Observed:
			return nil, nil
		}
	case SourceDone:
		switch ev.(type) {
		case Tick, Received, StreamBroken, Stop, SettleResult, IntentResult, Captured, Snapshotted, BoundarySent, PreserveResult, Observed, BulkIntentResult:
			return nil, nil // late: ignored
		}
	}
	return nil, invalid(s.phase, ev)
}

// sendPrepare sends PREPARE and the payload's chunks (and, cutting over
// eagerly, the boundary: past the point of no return from here, as after
// READY; the source serves again only through a preserve).
func (s *Source) sendPrepare(segs [][]byte) []Action {
	s.phase = SourcePreparing
	out := []Action{
		Send{Frame: &pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: s.prepare}}},
		StreamChunks{Segments: segs, Manifest: s.manifest},
	}
	if s.prepare.EagerCutover {
		s.phase = SourceCutover
		out = append(out, SendBoundary{})
	}
	return out
}

func (s *Source) sameID(b []byte) bool { return string(b) == string(s.cfg.ID[:]) }

// eager reports whether this relocation cuts over eagerly (EagerMaxBytes).
func (s *Source) eager() bool {
	return s.cfg.EagerMaxBytes > 0 && s.cfg.JoinGroup == "" && s.manifest.Length <= uint64(s.cfg.EagerMaxBytes) && s.manifest.Chunks <= 1
}

func (s *Source) buildPrepare() *pb.Prepare {
	r := s.seen.Record
	return &pb.Prepare{
		Version: wire.Version, RelocationId: s.cfg.ID[:],
		Coordinator: &pb.Fence{OwnerId: s.cfg.Self.ID, OwnerGeneration: s.cfg.Self.Generation, RoutingId: s.cfg.SelfRoutingID[:],
			ObjectGeneration: r.ObjectGeneration, AuthorityGeneration: r.AuthorityGeneration, StoreVersion: s.seen.StoreVersion},
		Target:        &pb.Fence{OwnerId: s.cfg.Target.Owner.ID, OwnerGeneration: s.cfg.Target.Owner.Generation, RoutingId: hexBytes(s.cfg.Target.Node.RoutingID)},
		Participants:  s.participants(),
		PayloadLength: s.manifest.Length, ChunkCount: s.manifest.Chunks, Crc32C: s.manifest.CRC32C,
		ApplicationVersion: s.cfg.AppVersion, DeadlineUnixMs: s.cfg.DeadlineMs, JoinGroup: s.cfg.JoinGroup,
		Nonce: s.cfg.Nonce,
	}
}

func ownerKey(alive bool, o record.OwnerRef) record.OwnerKey {
	if alive {
		return record.OwnerKey{Generation: o.Generation}
	}
	return record.OwnerKey{}
}

func hexBytes(h string) []byte {
	r, err := wire.ParseRoutingIDHex(h)
	if err != nil {
		return nil
	}
	return r[:]
}

// Participants is every object the relocation moves: the primary, then the
// members (a group's), as last written or read.
func (s *Source) Participants() []record.Snapshot {
	return append([]record.Snapshot{s.seen}, s.members...)
}

func (s *Source) participants() []*pb.Participant {
	out := make([]*pb.Participant, 0, 1+len(s.members))
	for _, sn := range s.Participants() {
		r := sn.Record
		out = append(out, &pb.Participant{Object: sn.Object.String(), Type: r.Type, ObjectGeneration: r.ObjectGeneration,
			AuthorityGeneration: r.AuthorityGeneration, StoreVersion: sn.StoreVersion, Record: r.Encode()})
	}
	return out
}

// updated returns the members with the records of objs that are still the
// source's at the same generations (a write or settle read of them).
func (s *Source) updated(objs map[string]record.Snapshot) []record.Snapshot {
	out := make([]record.Snapshot, len(s.members))
	for i, m := range s.members {
		out[i] = m
		if c, ok := objs[m.Object.String()]; ok && c.Record.Owner == s.cfg.Self &&
			c.Record.ObjectGeneration == m.Record.ObjectGeneration && c.Record.AuthorityGeneration == m.Record.AuthorityGeneration {
			out[i] = c
		}
	}
	return out
}

// membersIn returns every member's record: as found in v, or as last
// known (nil when there are no members).
func (s *Source) membersIn(v record.View) map[string]record.Snapshot {
	if len(s.members) == 0 {
		return nil
	}
	out := make(map[string]record.Snapshot, len(s.members))
	for _, m := range s.members {
		out[m.Object.String()] = m
		if c, ok := v.Objects[m.Object.String()]; ok {
			out[m.Object.String()] = c
		}
	}
	return out
}

// hexString is the storage form of a wire routing id ("" when malformed).
func hexString(b []byte) string {
	r, err := wire.ParseRoutingIDBytes(b)
	if err != nil {
		return ""
	}
	return r.Hex()
}
