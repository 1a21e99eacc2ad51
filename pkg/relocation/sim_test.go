package relocation

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// This file is the test bench shared by the transcripts (datadriven_test.go),
// the property test (property_test.go) and the benchmark: one Source and one
// Target machine, a simulated stream between them, and a fake store that
// applies the transactions of docs/design.md §3 with their exact compares. The
// etcd transactions themselves are tested against a real etcd in
// pkg/authority; here only their compare semantics matter.

// errUncertain stands for an etcd RPC error: the write may or may not have
// landed (docs/design.md §3, last point).
var errUncertain = errors.New("etcdserver: request timed out")

var (
	simNonce   = []byte("0123456789abcdef")
	simObject  = keyspace.Actor("counter", "c1")
	simRelocID = wire.RelocationID{0x01, 0x90, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x01}
)

// simRID is the routing id of a simulated node: 16 times its first letter.
func simRID(id string) wire.RoutingID {
	var r wire.RoutingID
	for i := range r {
		r[i] = id[0]
	}
	return r
}

func simNode(id string) record.NodeRef {
	return record.NodeRef{RoutingID: simRID(id).Hex(), Address: id + ":7100"}
}

// ---------------------------------------------------------------- fake store

// fakeStore holds one authority record, the owner keys and a revision
// counter, and applies Intend, Preserve, Commit and ResolveCommit like
// pkg/authority: every write compares the record's store version and the
// writer's owner key (present with exactly its generation).
type fakeStore struct {
	rev int64
	rec record.Snapshot
	// members: the other participants of a group relocation (rec is then
	// the group record); each transaction covers all of them (sim_group_test.go).
	members []record.Snapshot
	// joined: for an Actor Join, the group record, owned by the target.
	joined *record.Snapshot
	owners map[string]int64    // owner id → CreateRevision of owners/<id>; absent: deleted
	bulks  map[string]fakeBulk // relocations/<bulk id> (sim_bulk_test.go)

	// Facts for the invariant checks.
	commitTo  *record.OwnerRef // set when a Commit transaction was applied
	foreign   bool             // the record was rewritten by another transaction (move, recover)
	recreated bool             // … with another object generation (recover)
}

func newFakeStore() *fakeStore { return &fakeStore{owners: map[string]int64{}} }

func (f *fakeStore) bump() int64 { f.rev++; return f.rev }

// addOwner creates owners/<id>; its CreateRevision is the owner generation.
func (f *fakeStore) addOwner(id string) record.OwnerRef {
	g := f.bump()
	f.owners[id] = g
	return record.OwnerRef{ID: id, Generation: g}
}

func (f *fakeStore) expire(id string) bool {
	if _, ok := f.owners[id]; !ok {
		return false
	}
	delete(f.owners, id)
	f.bump() // a delete is a revision too
	return true
}

func (f *fakeStore) alive(o record.OwnerRef) bool {
	g, ok := f.owners[o.ID]
	return ok && g == o.Generation
}

func (f *fakeStore) owner(id string) record.OwnerRef {
	return record.OwnerRef{ID: id, Generation: f.owners[id]}
}

func (f *fakeStore) activate(obj keyspace.Object, owner record.OwnerRef) {
	rev := f.bump()
	f.rec = record.Snapshot{Object: obj, StoreVersion: rev, Revision: rev, Record: record.Record{
		Kind: obj.Kind, Type: obj.Type, ObjectGeneration: 1, AuthorityGeneration: 1,
		Owner: owner, Node: simNode(owner.ID), State: record.StateActive,
	}}
}

func (f *fakeStore) put(rec record.Record) {
	rev := f.bump()
	f.rec = record.Snapshot{Object: f.rec.Object, Record: rec, StoreVersion: rev, Revision: rev}
}

// write: If ModRevision(auth)=seen ∧ CreateRevision(owners/writer)=writer.Generation Then put rec.
func (f *fakeStore) write(seen record.Snapshot, writer record.OwnerRef, rec record.Record) WriteResult {
	if f.rec.StoreVersion == seen.StoreVersion && f.alive(writer) {
		f.put(rec)
		return WriteResult{Written: true, Found: true, OwnerAlive: true, Snapshot: f.rec}
	}
	return WriteResult{Found: true, OwnerAlive: f.alive(writer), Snapshot: f.rec}
}

func (f *fakeStore) intend(a WriteIntent, source record.OwnerRef) WriteResult {
	in := a.Intent
	plan := func(rec record.Record) record.Record {
		rec.State, rec.Intent = record.StateRelocating, &in
		return rec
	}
	if len(f.members) > 0 {
		return f.writeAll(a.Seen, a.Members, source, plan)
	}
	return f.write(a.Seen, source, plan(a.Seen.Record))
}

func (f *fakeStore) preserve(a Preserve, source record.OwnerRef, id wire.RelocationID) WriteResult {
	plan := func(rec record.Record) record.Record {
		rec.State, rec.Intent, rec.LastRelocation = record.StateActive, nil, id.String()
		return rec
	}
	if len(f.members) > 0 {
		return f.writeAll(a.Seen, a.Members, source, plan)
	}
	return f.write(a.Seen, source, plan(a.Seen.Record))
}

func planned(exp record.Snapshot, target record.OwnerRef, id wire.RelocationID) record.Record {
	r := exp.Record
	r.AuthorityGeneration++
	r.Owner, r.Node = target, simNode(target.ID)
	r.State, r.Intent, r.LastRelocation = record.StateActive, nil, id.String()
	return r
}

// commit: If Value(auth_i)=expected record_i ∀i ∧ CreateRevision(owners/target)=target.Generation
// Then put every participant owned by the target, ownerGeneration+1, intent cleared.
func (f *fakeStore) commit(a Commit, target record.OwnerRef) CommitResult {
	if len(f.members) > 0 || f.joined != nil {
		return f.commitAll(a, target)
	}
	ok := f.alive(target) && f.bulkHolds(a)
	for _, p := range a.Participants {
		ok = ok && p.Object == f.rec.Object && sameBytes(p.Record, f.rec.Record)
	}
	if !ok {
		return CommitResult{Records: map[string]record.Snapshot{f.rec.Object.String(): f.rec}}
	}
	// Like pkg/authority, the planned record is built from the participant
	// as the target knows it (from PREPARE), not from what the store holds.
	f.put(planned(a.Participants[0], target, a.RelocationID))
	t := target
	f.commitTo = &t
	return CommitResult{Committed: true, Records: map[string]record.Snapshot{f.rec.Object.String(): f.rec}}
}

// sameBytes is the commit's compare of a record's exact bytes.
func sameBytes(a, b record.Record) bool { return string(a.Encode()) == string(b.Encode()) }

// resolve reads back an uncertain commit: committed iff the record holds
// exactly the planned bytes at a newer store version.
func (f *fakeStore) resolve(a ResolveCommit, target record.OwnerRef) CommitResult {
	if len(f.members) > 0 || f.joined != nil {
		return f.resolveAll(a, target)
	}
	res := CommitResult{Records: map[string]record.Snapshot{f.rec.Object.String(): f.rec}}
	for _, p := range a.Participants {
		want := planned(p, target, a.RelocationID)
		if f.rec.StoreVersion <= p.StoreVersion || string(f.rec.Record.Encode()) != string(want.Encode()) {
			return res
		}
	}
	res.Committed = true
	return res
}

// view is the settle read: the record and the source's owner key at one revision.
func (f *fakeStore) view(source string) record.View {
	v := record.View{Revision: f.rev, Objects: f.objects(), Owners: map[string]record.OwnerKey{}}
	if g, ok := f.owners[source]; ok {
		v.Owners[source] = record.OwnerKey{Generation: g}
	} else {
		v.Owners[source] = record.OwnerKey{}
	}
	return v
}

func (f *fakeStore) String() string {
	r := f.rec.Record
	var b strings.Builder
	fmt.Fprintf(&b, "rev=%d sv=%d owner=%s gen=%d/%d %s", f.rev, f.rec.StoreVersion, r.Owner, r.ObjectGeneration, r.AuthorityGeneration, r.State)
	if r.Intent != nil {
		fmt.Fprintf(&b, "→%s", r.Intent.Target)
	}
	f.describeGroup(&b)
	f.describeBulks(&b)
	ids := make([]string, 0, len(f.owners))
	for id := range f.owners {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b.WriteString(" owners=(")
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s@%d", id, f.owners[id])
	}
	b.WriteString(")")
	return b.String()
}

// ---------------------------------------------------------------- the bench

type side int

const (
	onSource side = iota
	onTarget
)

func (s side) String() string { return [...]string{"source", "target"}[s] }

func (s side) other() side { return 1 - s }

// simConfig is a relocation to simulate.
type simConfig struct {
	DeadlineMs int64
	ChunkSize  int
	FallbackMs int64
	// Members > 0: the relocation moves group/g1 with that many members.
	Members int
	// Join: actor/counter/c1 joins group/g1, owned by the target.
	Join bool
	// MaxDeadlineMs: TargetConfig.MaxDeadlineMs.
	MaxDeadlineMs int64
	// EagerMaxBytes: SourceConfig.EagerMaxBytes.
	EagerMaxBytes int
	// PrecopyMinBytes: SourceConfig.PrecopyMinBytes (the state's size is
	// not known: the snapshot tells).
	PrecopyMinBytes int
	// Bulk: SourceConfig.BulkIntent (the one-write rule).
	Bulk bool
}

// sim drives one Source and one Target. Frames a side sends wait in flight
// until delivered; actions with a result wait as the side's pending I/O until
// a result is given. Every action and every step is checked against the
// invariants (check.go's part of this file, below) and, when out is set,
// printed for the transcripts.
type sim struct {
	cfg   simConfig
	store *fakeStore
	self  record.OwnerRef // the source owner
	tgtID record.OwnerRef // the target owner
	now   int64

	src *Source
	tgt *Target

	dead    [2]bool
	pending [2]Action // the action whose result a side waits for
	reading bool      // the source's ReadSettle is in flight
	changed bool      // the record changed since the source last observed it
	srcMode string    // where the source's mailbox puts a new request (from its actions)
	// changeChunks: the chunks the next capture changes (a pre-copy);
	// captured: the payload the last capture made.
	changeChunks []int
	captured     []byte
	draining     bool // the target's node drains
	started      bool // the source's Start ran
	prepared     bool // a PREPARE reached the target machine
	broken       bool // the stream broke: nothing more is carried
	segments     int  // > 1: the capture gives its payload in that many segments
	// late holds writes whose RPC failed without landing, which etcd may
	// still apply later (property test: "land late").
	late []func()

	inflight [2][]*pb.RelocationFrame // by destination side
	sent     [2][]*pb.RelocationFrame // every frame ever sent, by destination side

	// Invariant bookkeeping.
	admitted    bool
	reopened    bool
	lastObjGen  int64
	lastOwnGen  int64
	lastSV      int64
	violations  []string
	errs        []error
	allowProtoE bool // a gap or a conflict was injected: ErrProtocol is expected

	out   *strings.Builder // transcript output; nil: silent
	quiet bool             // do not print state lines (benchmark)
}

// newSim creates the store (owners s1 and t1, the object owned by s1), and
// both machines; the source has not started.
func newSim(cfg simConfig, out *strings.Builder) *sim {
	st := newFakeStore()
	s := &sim{cfg: cfg, store: st, out: out}
	s.self = st.addOwner("s1")
	s.tgtID = st.addOwner("t1")
	st.activate(simObject, s.self)
	join := st.setupGroups(cfg, s.self, s.tgtID)
	s.src = NewSource(SourceConfig{
		ID: simRelocID, Object: st.rec, Self: s.self, SelfRoutingID: simRID("s1"),
		Target:     TargetRef{Owner: s.tgtID, Node: simNode("t1")},
		AppVersion: "v1", DeadlineMs: cfg.DeadlineMs, ChunkSize: cfg.ChunkSize,
		Members: slices.Clone(st.members), JoinGroup: join, Nonce: simNonce, EagerMaxBytes: cfg.EagerMaxBytes,
		PrecopyMinBytes: cfg.PrecopyMinBytes, StateBytes: cfg.PrecopyMinBytes, // as large as the node last saw it
		BulkIntent: cfg.Bulk,
	})
	s.tgt = NewTarget(TargetConfig{Self: s.tgtID, SelfRoutingID: simRID("t1"), AppVersion: "v1", FallbackMs: cfg.FallbackMs, MaxDeadlineMs: cfg.MaxDeadlineMs})
	s.observeStore()
	return s
}

func (s *sim) printf(format string, args ...any) {
	if s.out != nil {
		fmt.Fprintf(s.out, format, args...)
	}
}

func (s *sim) violate(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	s.violations = append(s.violations, v)
	s.printf("VIOLATION: %s\n", v)
}

func (s *sim) start() {
	s.started, s.srcMode = true, "serve"
	s.handle(onSource, s.src.Start(), nil)
	s.afterStep()
}

// step delivers ev to one side and carries out what it returns.
func (s *sim) step(on side, ev Event) {
	if s.dead[on] {
		return
	}
	var acts []Action
	var err error
	// WakeAtMs's promise: a Tick before it (none due: 0) that brings no
	// news of draining makes no action.
	tk, isTick := ev.(Tick)
	quiet := false
	if on == onSource {
		w := s.src.WakeAtMs()
		quiet = isTick && (w == 0 || tk.NowMs < w)
		acts, err = s.src.Step(ev)
	} else {
		if _, ok := ev.(PrepareEvent); ok {
			s.prepared = true
		}
		w, drained := s.tgt.WakeAtMs(), s.tgt.draining
		quiet = isTick && (w == 0 || tk.NowMs < w) && tk.Draining == drained
		acts, err = s.tgt.Step(ev)
	}
	if quiet && len(acts) > 0 {
		s.violate("%s acted on a Tick at %d before its WakeAtMs: %v", on, tk.NowMs, acts)
	}
	s.handle(on, acts, err)
	s.afterStep()
}

func (s *sim) handle(on side, acts []Action, err error) {
	if err != nil {
		s.errs = append(s.errs, err)
		s.printf("  %s: error: %v\n", on, err)
		// design.md §9.5 / docs/contributing.md: an allowed event never gets
		// ErrInvalidTransition; a protocol error only answers bad input.
		if errors.Is(err, ErrInvalidTransition) || (errors.Is(err, ErrProtocol) && !s.allowProtoE) {
			s.violate("%s refused an allowed event: %v", on, err)
		}
	}
	for _, a := range acts {
		s.printf("  %s: %s\n", on, s.describe(a))
		s.check(on, a)
		s.apply(on, a)
	}
}

// apply carries out an action the way a driver would.
func (s *sim) apply(on side, a Action) {
	if on == onSource {
		// The source's mailbox: where a new request goes follows from the
		// actions alone (the node's driver does the same).
		switch a.(type) {
		case Seal:
			s.srcMode = "keep"
		case SendBoundary:
			s.srcMode = "hold"
		case Reopen:
			s.srcMode = "serve"
		case Drop:
			s.srcMode = "redirect"
		case FailPending:
			s.srcMode = "fail"
		}
	}
	switch a := a.(type) {
	case Send:
		s.send(on.other(), a.Frame)
	case StreamChunks:
		idx := a.Only
		if idx == nil {
			for i := range a.Manifest.Chunks {
				idx = append(idx, i)
			}
		}
		for _, i := range idx {
			start, end := a.Manifest.ChunkSpan(i)
			s.send(onTarget, &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{
				RelocationId: simRelocID[:], Index: i, Data: Gather(a.Segments, start, end, nil)}}})
		}
	case ReadSettle:
		if s.reading {
			s.violate("source: a second ReadSettle while one is in flight")
		}
		s.reading = true
	case WriteIntent, Seal, Snapshot, SendBoundary, Preserve, Restore, ReadGroup, Commit, ResolveCommit, AwaitBulkIntent:
		if s.pending[on] != nil {
			s.violate("%s: %s while %s is pending (an action with a result must end the batch)", on, actionName(a), actionName(s.pending[on]))
		}
		s.pending[on] = a
	}
}

func (s *sim) send(to side, f *pb.RelocationFrame) {
	s.sent[to] = append(s.sent[to], f)
	if s.broken {
		return // the stream is gone
	}
	s.inflight[to] = append(s.inflight[to], f)
}

// deliver hands one frame to a side: a PREPARE as PrepareEvent with the
// target's local facts, anything else as Received.
func (s *sim) deliver(to side, f *pb.RelocationFrame) {
	if to == onTarget {
		if p := f.GetPrepare(); p != nil {
			s.step(onTarget, PrepareEvent{Prepare: p, NowMs: s.now, Draining: s.draining, Bulk: s.store.readBulk(p.GetBulkId())})
			return
		}
	}
	s.step(to, Received{Frame: f})
}

func (s *sim) tick(now int64) {
	s.now = now
	s.step(onSource, Tick{NowMs: now})
	s.step(onTarget, Tick{NowMs: now, Draining: s.draining})
}

// crash stops a side: its stream breaks (frames in flight both ways are
// lost, the peer sees StreamBroken) and its pending I/O never completes. Its
// owner key stays until expire.
func (s *sim) crash(on side) {
	if s.dead[on] {
		return
	}
	s.dead[on] = true
	s.broken = true
	s.pending[on] = nil
	if on == onSource {
		s.reading = false
	}
	s.inflight = [2][]*pb.RelocationFrame{}
	s.step(on.other(), StreamBroken{Err: errors.New("stream reset")})
}

func (s *sim) expire(id string) {
	if s.store.expire(id) {
		s.ownerChanged(id)
	}
}

// storeChanged: the authority record changed; the source's location cache
// will show it (observe delivers it).
func (s *sim) storeChanged() {
	s.changed = true
	s.observeStore()
}

// ownerChanged: an owner key changed (no location cache shows owner keys:
// the source's periodic reads see its own).
func (s *sim) ownerChanged(string) { s.observeStore() }

// observe delivers the record as the source's location cache shows it now.
func (s *sim) observe() {
	s.changed = false
	if s.dead[onSource] || !s.started {
		return
	}
	s.step(onSource, Observed{Location: record.LocationOf(s.store.rec)})
}

// settleRead completes the source's ReadSettle (err: the read failed).
func (s *sim) settleRead(err error) {
	s.reading = false
	if err != nil {
		s.step(onSource, SettleResult{Err: err})
		return
	}
	s.step(onSource, SettleResult{View: s.store.view(s.self.ID)})
}

// readable reports whether the source awaits a settle read.
func (s *sim) readable() bool { return s.reading && !s.dead[onSource] }

// result kinds for complete.
type outcomeKind int

const (
	resOK             outcomeKind = iota // the RPC answered (the compare decides)
	resUncertain                         // RPC error, the write did not land
	resUncertainWrote                    // RPC error, the write landed
	resFail                              // capture or restore failed; a resolve read failed
)

// complete gives the result of a side's pending action; n is the payload
// size of a capture or the request count of a boundary. It returns whether
// the store changed (for the transcripts' ok/fails expectations).
func (s *sim) complete(on side, k outcomeKind, n int) (wrote bool) {
	a := s.pending[on]
	s.pending[on] = nil
	uncertain := k == resUncertain || k == resUncertainWrote
	var ev Event
	switch a := a.(type) {
	case WriteIntent:
		var r WriteResult
		if k != resUncertain {
			r = s.store.intend(a, s.self)
			wrote = s.noteWrite("intent", r.Written, uncertain)
		}
		ev = IntentResult{Result: r}
		if uncertain {
			ev = IntentResult{Err: errUncertain}
		}
	case AwaitBulkIntent:
		ev = s.completeBulk(a, k)
	case Snapshot:
		if k == resFail {
			ev = Snapshotted{Err: errors.New("snapshot failed")}
		} else {
			ev = Snapshotted{Segments: [][]byte{simPayload(n)}}
		}
	case Seal:
		if k == resFail {
			ev = Captured{Err: errors.New("snapshot failed")}
		} else {
			p := simPayload(n)
			for _, c := range s.changeChunks { // a pre-copy: what changed since the snapshot
				p[c*s.cfg.ChunkSize] ^= 0xff
			}
			s.changeChunks = nil
			s.captured = p
			ev = Captured{Payload: p}
			if s.segments > 1 { // a large state streamed from its parts (Captured.Segments)
				var segs [][]byte
				for k := range s.segments {
					segs = append(segs, p[n*k/s.segments:n*(k+1)/s.segments])
				}
				ev = Captured{Segments: segs}
			}
		}
	case SendBoundary:
		var crc uint32
		for i := range n {
			req := simRequest(i)
			crc = wire.UpdateCRC32C(crc, RequestBytes(req))
			s.send(onTarget, &pb.RelocationFrame{Frame: &pb.RelocationFrame_Data{Data: &pb.Data{RelocationId: simRelocID[:], Sequence: uint32(i), Request: req}}})
		}
		s.send(onTarget, &pb.RelocationFrame{Frame: &pb.RelocationFrame_Cutover{Cutover: &pb.Cutover{RelocationId: simRelocID[:], DataCount: uint32(n), DataCrc32C: crc}}})
		ev = BoundarySent{Count: n}
	case Preserve:
		var r WriteResult
		if k != resUncertain {
			r = s.store.preserve(a, s.self, simRelocID)
			wrote = s.noteWrite("preserve", r.Written, uncertain)
		} else {
			s.late = append(s.late, func() { s.noteWrite("late preserve", s.store.preserve(a, s.self, simRelocID).Written, false) })
		}
		ev = PreserveResult{Result: r}
		if uncertain {
			ev = PreserveResult{Err: errUncertain}
		}
	case Restore:
		if k == resFail {
			ev = Restored{Err: errors.New("corrupt envelope")}
		} else {
			ev = Restored{}
		}
	case ReadGroup:
		if k == resFail || s.store.joined == nil {
			ev = GroupRead{Err: errUncertain}
		} else {
			ev = GroupRead{Snapshot: *s.store.joined}
		}
	case Commit:
		var r CommitResult
		if k != resUncertain {
			r = s.store.commit(a, s.tgtID)
			wrote = s.noteWrite("commit", r.Committed, uncertain)
		} else {
			s.late = append(s.late, func() { s.noteWrite("late commit", s.store.commit(a, s.tgtID).Committed, false) })
		}
		ev = r
		if uncertain {
			ev = CommitResult{Err: errUncertain}
		}
	case ResolveCommit:
		if k == resFail {
			s.printf("  etcd: read-back: RPC error (%v)\n", errUncertain)
			ev = CommitResult{Err: errUncertain}
		} else {
			r := s.store.resolve(a, s.tgtID)
			s.printf("  etcd: read-back: committed=%v\n", r.Committed)
			ev = r
		}
	default:
		s.printf("  (nothing pending on the %s)\n", on)
		return false
	}
	if uncertain {
		s.printf("  etcd: %s: RPC error (%v)\n", actionName(a), errUncertain)
	}
	s.step(on, ev)
	return wrote
}

// noteWrite records and prints what a transaction did, before the machine
// sees its result.
func (s *sim) noteWrite(what string, written, uncertain bool) bool {
	switch {
	case written:
		s.storeChanged()
		s.printf("  etcd: %s written at sv=%d\n", what, s.store.rec.StoreVersion)
	case !uncertain:
		s.printf("  etcd: %s compare failed (sv=%d, owner %s)\n", what, s.store.rec.StoreVersion, s.store.rec.Record.Owner)
	}
	return written
}

// simPayload is a captured envelope of n bytes (deterministic).
func simPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func simRequest(i int) *pb.CallRequest {
	op := wire.OperationID{0x01, 0x90, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0x10, byte(i + 1)}
	return &pb.CallRequest{Version: wire.Version, Object: simObject.String(), Method: "add", Args: [][]byte{[]byte("1")}, OperationId: op[:]}
}

// ---------------------------------------------------------------- invariants

// check asserts, as each action is emitted, what design.md §9 requires of it.
func (s *sim) check(on side, a Action) {
	st := s.store
	rec := st.rec.Record
	switch a := a.(type) {
	case Restore:
		// What the target restores is what the source captured (a
		// pre-copy's base and delta, or the whole payload).
		if s.captured != nil && !bytes.Equal(a.Payload, s.captured) {
			s.violate("the target restores %d bytes that are not the %d the source captured", len(a.Payload), len(s.captured))
		}
	case Admit:
		// doc.go invariant 3: the target admits nothing before its commit succeeded.
		if st.commitTo == nil || *st.commitTo != s.tgtID {
			s.violate("target admits without a successful commit")
		}
		if !st.foreign && rec.Owner != s.tgtID {
			s.violate("target admits while the store names %s", rec.Owner)
		}
		s.admitted = true
	case Reopen:
		// doc.go invariant 1/2: the source reopens only through a winning preserve.
		if st.commitTo != nil {
			s.violate("source reopens after the target's commit succeeded")
		}
		if s.bulkUnsent() {
			// A bulk unit that gives up before its PREPARE left serves
			// again as if it never sealed: nothing of the move was
			// written, and nothing can commit without the nonce.
			s.reopened = true
			break
		}
		if rec.Owner != s.self || !st.alive(s.self) {
			s.violate("source reopens while the store names %s (source alive: %v)", rec.Owner, st.alive(s.self))
		}
		if a.Record.StoreVersion != st.rec.StoreVersion {
			s.violate("source reopens with store version %d, the store has %d", a.Record.StoreVersion, st.rec.StoreVersion)
		}
		s.reopened = true
	case Drop:
		if st.commitTo == nil {
			s.violate("source drops its copy but no commit succeeded")
		}
	case Finish:
		s.checkFinish(on, a)
	}
}

// checkFinish: the outcome agrees with the store (docs/design.md §9.4):
// completed ⇔ the target owns it; aborted ⇔ the source owns it; failed ⇔
// the source cannot serve it.
func (s *sim) checkFinish(on side, f Finish) {
	st := s.store
	rec := st.rec.Record
	switch {
	case on == onSource && st.commitTo != nil && !st.recreated && f.Outcome != Completed && f.Outcome != Shutdown:
		// The converse: once the target committed (whatever happened to
		// it or the object since, short of a re-creation), the source's
		// settle says committed (docs/seed-bugs.md bug 1).
		s.violate("source finished %s but the target's commit is in the store", f.Outcome)
	case on == onSource && f.Outcome == Completed:
		if st.commitTo == nil || (!st.foreign && rec.Owner != s.tgtID) {
			s.violate("source finished completed but the store names %s", rec.Owner)
		}
	case on == onSource && f.Outcome == Aborted:
		if rec.Owner != s.self || st.commitTo != nil {
			s.violate("source finished aborted but the store names %s", rec.Owner)
		}
	case on == onSource && f.Outcome == Failed:
		if rec.Owner == s.self && st.alive(s.self) {
			s.violate("source finished failed while it still owns the object with a live lease")
		}
	case on == onTarget && f.Outcome == Completed:
		if st.commitTo == nil {
			s.violate("target finished completed without a commit")
		}
	case on == onTarget:
		if st.commitTo != nil && !st.foreign {
			s.violate("target finished %s but its commit is in the store: the object is orphaned", f.Outcome)
		}
	}
}

// afterStep asserts what holds at every point.
func (s *sim) afterStep() {
	s.observeStore()
	// (b) never two owners serving: the source serves (before its seal, or
	// reopened) while the target serves a committed record.
	srcServes := !s.dead[onSource] && s.started && s.srcMode == "serve"
	tgtServes := !s.dead[onTarget] && s.tgt.Outcome() == Completed
	if srcServes && tgtServes {
		s.violate("two owners serve: the source reopened and the target committed")
	}
	if srcServes && s.store.commitTo != nil {
		s.violate("the source serves while the target holds the committed record")
	}
}

// observeStore: generations and store versions never decrease (design.md §9.3),
// and the record always names exactly one owner (§9.1).
func (s *sim) observeStore() {
	s.checkGroups()
	r := s.store.rec
	if r.Record.Owner.IsZero() {
		s.violate("the record names no owner")
	}
	if r.Record.ObjectGeneration < s.lastObjGen ||
		(r.Record.ObjectGeneration == s.lastObjGen && r.Record.AuthorityGeneration < s.lastOwnGen) {
		s.violate("generations went back: %d/%d after %d/%d", r.Record.ObjectGeneration, r.Record.AuthorityGeneration, s.lastObjGen, s.lastOwnGen)
	}
	if r.StoreVersion < s.lastSV {
		s.violate("store version went back: %d after %d", r.StoreVersion, s.lastSV)
	}
	s.lastObjGen, s.lastOwnGen, s.lastSV = r.Record.ObjectGeneration, r.Record.AuthorityGeneration, r.StoreVersion
}

// finished: both machines ended, or the side is gone (a target that never
// got its PREPARE never existed for a real driver).
func (s *sim) finished() bool {
	srcDone := s.dead[onSource] || s.src.Phase() == SourceDone
	tgtDone := s.dead[onTarget] || s.tgt.Phase() == TargetDone || (s.tgt.Phase() == TargetNew && len(s.inflight[onTarget]) == 0)
	return srcDone && tgtDone
}

// checkEnd asserts the final state agrees with the outcomes.
func (s *sim) checkEnd() {
	st := s.store
	rec := st.rec.Record
	if st.foreign {
		return
	}
	if rec.Owner == s.tgtID && !s.dead[onTarget] && s.tgt.Outcome() != Completed {
		s.violate("the store names the target but the target ended %s", s.tgt.Outcome())
	}
	if rec.Owner == s.self && st.alive(s.self) && !s.dead[onSource] && s.src.Outcome() != Aborted {
		s.violate("the source owns the object with a live lease but ended %s", s.src.Outcome())
	}
	if rec.Owner == s.tgtID && !s.dead[onSource] && s.src.Outcome() == Aborted {
		s.violate("the source ended aborted but the target owns the object")
	}
}

// ---------------------------------------------------------------- printing

func joinOf(s *record.Snapshot) keyspace.Object {
	if s == nil {
		return keyspace.Object{}
	}
	return s.Object
}

func actionName(a Action) string { return strings.TrimPrefix(fmt.Sprintf("%T", a), "relocation.") }

func (s *sim) describe(a Action) string {
	switch a := a.(type) {
	case Send:
		return "Send " + describeFrame(a.Frame)
	case StreamChunks:
		if a.Only != nil {
			return fmt.Sprintf("StreamChunks only=%v of chunks=%d len=%d", a.Only, a.Manifest.Chunks, a.Manifest.Length)
		}
		return fmt.Sprintf("StreamChunks chunks=%d len=%d", a.Manifest.Chunks, a.Manifest.Length)
	case Seal:
		if a.Align > 0 {
			return fmt.Sprintf("Seal align=%d", a.Align)
		}
		return "Seal"
	case Snapshot:
		return fmt.Sprintf("Snapshot align=%d", a.Align)
	case WriteIntent:
		return fmt.Sprintf("WriteIntent sv=%d target=%s deadline=%d", a.Seen.StoreVersion, a.Intent.Target, a.Intent.DeadlineMs)
	case AwaitBulkIntent:
		return fmt.Sprintf("AwaitBulkIntent sv=%d", a.Unit.StoreVersion)
	case Preserve:
		return fmt.Sprintf("Preserve sv=%d", a.Seen.StoreVersion)
	case Reopen:
		return fmt.Sprintf("Reopen sv=%d owner=%s gen=%d/%d", a.Record.StoreVersion, a.Record.Record.Owner, a.Record.Record.ObjectGeneration, a.Record.Record.AuthorityGeneration) + groupNote(len(a.Members), keyspace.Object{})
	case Drop:
		return fmt.Sprintf("Drop owner=%s gen=%d/%d applied=%d", a.Committed.Owner, a.Committed.ObjectGeneration, a.Committed.AuthorityGeneration, a.DataApplied) + groupNote(len(a.Members), keyspace.Object{})
	case FailPending:
		return fmt.Sprintf("FailPending code=%s %q", a.Code, a.Message)
	case Finish:
		if a.Message == "" {
			return fmt.Sprintf("Finish %s code=%s", a.Outcome, a.Code)
		}
		return fmt.Sprintf("Finish %s code=%s %q", a.Outcome, a.Code, a.Message)
	case Restore:
		return fmt.Sprintf("Restore len=%d", len(a.Payload))
	case Recycle:
		return fmt.Sprintf("Recycle chunks=%d", len(a.Data))
	case Commit:
		return fmt.Sprintf("Commit expect sv=%d gen=%d/%d", a.Participants[0].StoreVersion, a.Participants[0].Record.ObjectGeneration, a.Participants[0].Record.AuthorityGeneration) + groupNote(len(a.Participants)-1, joinOf(a.Join))
	case ResolveCommit:
		return "ResolveCommit"
	case Admit:
		c := a.Committed[s.store.rec.Object.String()]
		return fmt.Sprintf("Admit data=%d owner=%s gen=%d/%d sv=%d", len(a.Data), c.Record.Owner, c.Record.ObjectGeneration, c.Record.AuthorityGeneration, c.StoreVersion)
	}
	return actionName(a)
}

func describeFrame(f *pb.RelocationFrame) string {
	switch x := f.GetFrame().(type) {
	case *pb.RelocationFrame_Prepare:
		eager := ""
		if x.Prepare.GetEagerCutover() {
			eager = " eager"
		}
		if x.Prepare.GetPrecopy() {
			eager = fmt.Sprintf(" precopy chunk-size=%d", x.Prepare.GetChunkSize())
		}
		if b := x.Prepare.GetBulkId(); b != "" {
			eager += " bulk=" + b
		}
		return fmt.Sprintf("PREPARE chunks=%d len=%d sv=%d deadline=%d%s", x.Prepare.GetChunkCount(), x.Prepare.GetPayloadLength(), x.Prepare.GetCoordinator().GetStoreVersion(), x.Prepare.GetDeadlineUnixMs(), eager)
	case *pb.RelocationFrame_Chunk:
		return fmt.Sprintf("STATE #%d len=%d", x.Chunk.GetIndex(), len(x.Chunk.GetData()))
	case *pb.RelocationFrame_Failed:
		return fmt.Sprintf("FAILED code=%s %q", x.Failed.GetCode(), x.Failed.GetMessage())
	case *pb.RelocationFrame_Data:
		return fmt.Sprintf("DATA #%d", x.Data.GetSequence())
	case *pb.RelocationFrame_Cutover:
		return fmt.Sprintf("CUTOVER count=%d", x.Cutover.GetDataCount())
	case *pb.RelocationFrame_Sealed:
		return fmt.Sprintf("SEALED chunks=%d len=%d changed=%v", x.Sealed.GetChunkCount(), x.Sealed.GetPayloadLength(), x.Sealed.GetChanged())
	case *pb.RelocationFrame_Outcome:
		c := x.Outcome.GetCommitted()
		return fmt.Sprintf("OUTCOME code=%s applied=%d owner=%s@%d gen=%d/%d", x.Outcome.GetCode(), x.Outcome.GetDataApplied(),
			c.GetOwnerId(), c.GetOwnerGeneration(), c.GetObjectGeneration(), c.GetAuthorityGeneration())
	}
	return frameName(f)
}

// shortFrame names a frame in the in-flight list.
func shortFrame(f *pb.RelocationFrame) string {
	switch x := f.GetFrame().(type) {
	case *pb.RelocationFrame_Chunk:
		return fmt.Sprintf("STATE#%d", x.Chunk.GetIndex())
	case *pb.RelocationFrame_Data:
		return fmt.Sprintf("DATA#%d", x.Data.GetSequence())
	}
	return frameName(f)
}

func (s *sim) sideState(on side) string {
	var ph string
	if on == onSource {
		ph = s.src.Phase().String()
		if !s.started {
			ph = "unstarted"
		}
	} else {
		ph = s.tgt.Phase().String()
	}
	if s.dead[on] {
		ph += "(crashed)"
	} else if p := s.pending[on]; p != nil {
		ph += "(awaits " + actionName(p) + ")"
	} else if on == onSource && s.reading {
		ph += "(awaits ReadSettle)"
	}
	return ph
}

// printState ends each transcript step: phases, the store, frames in flight.
func (s *sim) printState() {
	if s.out == nil || s.quiet {
		return
	}
	fmt.Fprintf(s.out, "phases: source=%s target=%s\n", s.sideState(onSource), s.sideState(onTarget))
	fmt.Fprintf(s.out, "store: %s\n", s.store)
	if len(s.inflight[onTarget])+len(s.inflight[onSource]) > 0 {
		names := func(fs []*pb.RelocationFrame) string {
			var n []string
			for _, f := range fs {
				n = append(n, shortFrame(f))
			}
			return strings.Join(n, " ")
		}
		fmt.Fprintf(s.out, "in flight: →target[%s] →source[%s]\n", names(s.inflight[onTarget]), names(s.inflight[onSource]))
	}
}

// cloneFrame copies a frame (to corrupt one without touching the sender's).
func cloneFrame(f *pb.RelocationFrame) *pb.RelocationFrame {
	return proto.Clone(f).(*pb.RelocationFrame)
}
