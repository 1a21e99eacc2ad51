//go:build failpoints

package node_test

// Regression tests, one per bug of the reference runtime's 0.30.2 release that
// applies to this design (docs/seed-bugs.md maps all 34 of them), at the level
// of the node: the relocation driver, its gRPC streams, reply relays and
// metrics. The pure machines' side of bugs 1, 2, 3, 11, 12 and 15 is specified
// by pkg/relocation/testdata/*.txt.

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func errCode(err error) pb.Code {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return pb.Code_CODE_UNSPECIFIED
}

// waitOwner waits until the record of object names owner.
func (fm *faultMesh) waitOwner(t *testing.T, object string, owner authority.OwnerRef, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if got := fm.record(t, object).Record.Owner; got == owner {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%s: owner %s after %s, want %s", object, got, within, owner)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Bugs 1 and 3: the target commits (after its fallback wait: the source is
// held before CUTOVER), then "restarts" — its lease ends (revoked in etcd, as
// when its process dies) and the same owner id comes back under a new
// generation — before the source reads. The record names the committed
// owner pair, no longer alive: same object generation, larger owner
// generation, an owner pair other than the source's = committed, not lost.
func TestSeedBug01_03_SettleCommittedAfterTargetRestart(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/restart"
	fill(t, c, obj, "a")
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.SourceBeforeCutover, "sleep:3s@1")

	reloc := relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID})
	fm.waitOwner(t, obj, dst.Self(), 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := fm.etcd.Revoke(ctx, dst.Keeper().LeaseID()); err != nil {
		t.Fatal(err)
	}
	again := fm.add(t, dst.Self().ID)
	if again.Self().Generation <= dst.Self().Generation {
		t.Fatalf("restarted target %s, was %s", again.Self(), dst.Self())
	}
	select {
	case r := <-reloc:
		t.Fatalf("the source settled before the target restarted (%v): raise the sleep", r.st)
	default:
	}
	st := waitRelocation(t, reloc, 15*time.Second)
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)
	fm.checkOutcomeMetric(t, src, "source", "completed")
	hostsNothing(t, src)
	// The committed owner died with the state: the next call re-creates the
	// object and says so.
	if _, err := c.Call(context.Background(), obj, "read"); errCode(err) != pb.Code_CODE_STATE_LOST {
		t.Errorf("first call after the committed owner restarted: %v, want STATE_LOST", err)
	}
}

// Bugs 1 and 2: after the commit the object moved on to a third node before
// the source read. Committed all the same, and the source redirects to the
// owner of that one read (never to the target it chose): callers follow it
// and lose nothing.
func TestSeedBug01_02_SettleCommittedAfterObjectMovedOn(t *testing.T) {
	fm := startFaultMesh(t, 3)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/onward"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	third := fm.other(t, src, dst)
	arm(t, failpoint.SourceBeforeCutover, "sleep:3s@1")
	a := startAppender(t, c, obj, "x")

	reloc := relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID})
	if ta := targetAttempt(t, dst, obj, 3*time.Second); ta.GetOutcome() != "completed" { // committed and admitted
		t.Fatalf("target attempt %v", ta)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st2, err := dst.Relocate(ctx, obj, node.RelocateOptions{Target: third.Self().ID})
	if err != nil || st2.GetOutcome() != "completed" {
		t.Fatalf("onward relocation: %v %v", st2, err)
	}
	select {
	case r := <-reloc:
		t.Fatalf("the source settled before the object moved on (%v): raise the sleep", r.st)
	default:
	}
	st := waitRelocation(t, reloc, 15*time.Second)
	time.Sleep(100 * time.Millisecond)
	acked := a.halt(t)
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)
	if rec := fm.record(t, obj).Record; rec.ObjectGeneration != 1 || rec.AuthorityGeneration != 3 {
		t.Errorf("record generations %d/%d, want 1/3", rec.ObjectGeneration, rec.AuthorityGeneration)
	}
	fm.serves(t, third, c, obj)
	checkList(t, c, obj, first, a, acked)
	fm.checkOutcomeMetric(t, src, "source", "completed")
	hostsNothing(t, src)
}

// Bugs 4 and 5: a reply relay is validated by the requester against its own
// owner fence and its pending reply routes only — not against a relocation
// still running on it, nor against store versions. Here the relay arrives
// after the source's relocation ended; the reply carries the target's fence
// with the record's current store version. Then bad relays get typed
// answers: a duplicate ALREADY_TERMINAL, an unknown route NOT_FOUND, another
// requester generation STALE_FENCE.
func TestSeedBug04_05_LateRelayValidatedByRequesterFence(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/slowlist/late"
	fill(t, c, obj, "a")
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetBeforeRelay, "sleep:1s")

	order, calls, reloc := sealScenario(c, src, obj, []string{"q1"}, nil, node.RelocateOptions{Target: dst.Self().ID})
	st := waitRelocation(t, reloc, 30*time.Second)
	ended := time.Now()
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)
	await(t, order[0], calls[0])
	r := await(t, order[1], calls[1])
	if r.rep == nil {
		t.FailNow()
	}
	if !r.at.After(ended) || r.rep.Replayed {
		t.Errorf("q1 answered at +%v after the relocation ended, replayed=%v: want a late relay", r.at.Sub(ended), r.rep.Replayed)
	}
	rec := fm.record(t, obj)
	if r.rep.Fence.Owner != dst.Self() || r.rep.Fence.AuthorityGeneration != 2 || r.rep.StoreVersion != rec.StoreVersion {
		t.Errorf("relayed reply fence %+v store version %d, want the target's, generation 2, store version %d", r.rep.Fence, r.rep.StoreVersion, rec.StoreVersion)
	}
	// The target counts the relay once the source's acknowledgement came
	// back, which can be just after the caller got its reply.
	var got float64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got = fm.metricSum(t, dst, "meshloc_replies_relayed_total", map[string]string{"ack": wire.CodeName(pb.Code_CODE_OK)})
		if got == 1 || time.Now().After(deadline) {
			break
		}
	}
	if got != 1 {
		t.Errorf("relays acknowledged ok: %v, want 1", got)
	}

	rid := fm.routingID(t, src)
	peer := rpcpb.NewPeerServiceClient(dial(t, src))
	relay := func(mut func(m *pb.ReplyRelay)) pb.Code {
		t.Helper()
		op := wire.NewOperationID()
		m := &pb.ReplyRelay{RelocationId: st.GetRelocationId(), OperationId: op[:], ReplyRoute: 1,
			Requester: &pb.Requester{OwnerId: src.Self().ID, OwnerGeneration: src.Self().Generation, RoutingId: rid[:], Address: src.Address(), ReplyRoute: 1},
			Reply:     &pb.CallReply{Code: pb.Code_CODE_OK, Payload: []byte(`{"forged":true}`)}}
		mut(m)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ack, err := peer.RelayReply(ctx, m)
		if err != nil {
			t.Fatalf("RelayReply: %v", err)
		}
		return ack.GetCode()
	}
	// q1 was the first request this node handed over: reply route 1.
	// Another request's relay to that answered route learns nothing:
	// not_found, as for a route that never was.
	if got := relay(func(*pb.ReplyRelay) {}); got != pb.Code_CODE_NOT_FOUND {
		t.Errorf("a stranger's relay to an answered route: %v, want NOT_FOUND", got)
	}
	if got := relay(func(m *pb.ReplyRelay) { m.ReplyRoute = 1 << 40; m.Requester.ReplyRoute = 1 << 40 }); got != pb.Code_CODE_NOT_FOUND {
		t.Errorf("relay to an unknown route: %v, want NOT_FOUND", got)
	}
	if got := relay(func(m *pb.ReplyRelay) { m.Requester.OwnerGeneration++ }); got != pb.Code_CODE_STALE_FENCE {
		t.Errorf("relay to another generation of the requester: %v, want STALE_FENCE", got)
	}
	if got := relay(func(m *pb.ReplyRelay) { m.Requester.OwnerId = dst.Self().ID }); got != pb.Code_CODE_STALE_FENCE {
		t.Errorf("relay to another requester: %v, want STALE_FENCE", got)
	}
	if items := readItems(t, c, obj); strings.Join(items, ",") != "a,c0,q1" {
		t.Errorf("items %q", items)
	}
}

// sameAsText reports whether a and b, different bytes, read the same once
// decoded as UTF-8 text (invalid bytes replaced): ids compared as text
// would be confused.
func sameAsText(a, b []byte) bool {
	return string(a) != string(b) && strings.ToValidUTF8(string(a), "\uFFFD") == strings.ToValidUTF8(string(b), "\uFFFD")
}

// textTwin returns id with one byte changed so that both read the same as
// UTF-8 text (the change is in an invalid byte), or false.
func textTwin(id []byte) ([]byte, bool) {
	for i := range id {
		for b := 0x80; b <= 0xff; b++ {
			c := append([]byte(nil), id...)
			c[i] = byte(b)
			if sameAsText(id, c) {
				return c, true
			}
		}
	}
	return nil, false
}

// Bugs 6 and 30: operation ids and routing ids are bytes, compared as
// bytes. A relay whose operation id differs from the pending request's only
// in a non-UTF-8 byte is a protocol error, and so is not taken for it; a
// relay to a requester routing id that differs only in such a byte, and a
// PREPARE for a target routing id that does, are refused STALE_FENCE. None
// of them changes anything: the caller still gets its real reply.
func TestSeedBug06_30_IdsComparedAsBytes(t *testing.T) {
	fm := startFaultMesh(t, 2, func(_ int, c *node.Config) { c.CallTimeout = 4 * time.Second })
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/slowlist/bytes"
	fill(t, c, obj, "a")
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetBeforeRelay, "sleep:1500ms")

	op := wire.NewOperationID()
	op[14], op[15] = 0xc3, 0xff // the random tail of a UUIDv7: still valid
	forgedOp := op
	forgedOp[15] = 0xfe
	if !sameAsText(op[:], forgedOp[:]) {
		t.Fatal("test operation ids are not text twins")
	}
	c0 := launch(c, obj, "append", "bytes-c0", "500")
	waitStarted(t, "bytes-c0") // q1 queues behind it, to be captured by the move
	q1 := make(chan callResult, 1)
	go func() {
		rep, err := c.CallOp(context.Background(), op, obj, "append", [][]byte{[]byte("q1")})
		q1 <- callResult{rep, err, time.Now()}
	}()
	time.Sleep(60 * time.Millisecond)
	st := waitRelocation(t, relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID}), 30*time.Second)
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)

	// q1's reply is being relayed (slowly): its route is pending on src.
	rid := fm.routingID(t, src)
	ridTwin, ok := textTwin(rid[:])
	if !ok {
		t.Skipf("routing id %x has no byte whose change keeps its text form", rid)
	}
	peer := rpcpb.NewPeerServiceClient(dial(t, src))
	relay := func(opID []byte, requesterRID []byte) pb.Code {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ack, err := peer.RelayReply(ctx, &pb.ReplyRelay{RelocationId: st.GetRelocationId(), OperationId: opID, ReplyRoute: 1,
			Requester: &pb.Requester{OwnerId: src.Self().ID, OwnerGeneration: src.Self().Generation, RoutingId: requesterRID, Address: src.Address(), ReplyRoute: 1},
			Reply:     &pb.CallReply{Code: pb.Code_CODE_OK, Payload: []byte(`{"length":999}`)}})
		if err != nil {
			t.Fatalf("RelayReply: %v", err)
		}
		return ack.GetCode()
	}
	if got := relay(op[:], ridTwin); got != pb.Code_CODE_STALE_FENCE {
		t.Errorf("relay to a routing id that differs in a non-UTF-8 byte: %v, want STALE_FENCE", got)
	}
	if got := relay(forgedOp[:], rid[:]); got != pb.Code_CODE_NOT_FOUND {
		t.Errorf("relay of an operation id that differs in a non-UTF-8 byte: %v, want NOT_FOUND", got)
	}
	await(t, "c0", c0)
	r := await(t, "q1", q1)
	if r.rep != nil && (length(t, r) != 3 || r.rep.Replayed) {
		t.Errorf("q1 answered %s (replayed=%v), want its own reply {\"length\":3} by relay", r.rep.Payload, r.rep.Replayed)
	}
	if r.err != nil {
		t.Errorf("a relay refused (another request's) consumed the pending reply route: the real relay was then answered " +
			"ALREADY_TERMINAL and the caller never got its reply (PeerService.RelayReply takes the route before checking the operation id)")
	}

	// The target's side: a PREPARE naming dst by a routing id that differs in
	// one non-UTF-8 byte is refused STALE_FENCE; with dst's exact routing id
	// (and a deadline already passed, so nothing is staged) it gets past the
	// fence check.
	drid := fm.routingID(t, dst)
	twin, ok := textTwin(drid[:])
	if !ok {
		t.Skipf("routing id %x has no byte whose change keeps its text form", drid)
	}
	if f := prepareOnly(t, dst, rawPrepare(dst, twin, "actor/list/p1", "list", []byte("x"), time.Now().Add(10*time.Second))); f.GetFailed().GetCode() != pb.Code_CODE_STALE_FENCE {
		t.Errorf("PREPARE for a routing id that differs in a non-UTF-8 byte: %v, want FAILED STALE_FENCE", f)
	}
	if f := prepareOnly(t, dst, rawPrepare(dst, drid[:], "actor/list/p2", "list", []byte("x"), time.Now().Add(-time.Second))); f.GetFailed().GetCode() != pb.Code_CODE_DEADLINE_EXCEEDED {
		t.Errorf("PREPARE with dst's routing id after its deadline: %v, want FAILED DEADLINE_EXCEEDED", f)
	}
}

// ---------------------------------------------------------------- raw relocation streams

// rawPayload is a relocation payload of one participant (the layout of
// proto/meshloc/v1 Envelope: "MLRE", the envelope's length, the envelope
// without the state, the state).
func rawPayload(id []byte, object, typ string, state, timers, replies []byte) []byte {
	env := &pb.Envelope{Version: wire.Version, RelocationId: id, Participants: []*pb.ParticipantState{{
		Participant: &pb.Participant{Object: object, Type: typ, ObjectGeneration: 1, AuthorityGeneration: 1, StoreVersion: 1},
		StateLength: uint64(len(state)), Timers: timers, Replies: replies,
	}}}
	hdr, err := proto.Marshal(env)
	if err != nil {
		panic(err)
	}
	out := binary.BigEndian.AppendUint32([]byte("MLRE"), uint32(len(hdr)))
	return append(append(out, hdr...), state...)
}

// rawPrepare is a PREPARE of one participant to n, from a coordinator that
// does not exist; its payload is one chunk.
func rawPrepare(n *node.Node, targetRID []byte, object, typ string, payload []byte, deadline time.Time) *pb.Prepare {
	id := wire.NewRelocationID()
	coord := wire.NewRoutingID()
	nonce := wire.NewNonce()
	// A record carrying this relocation's intent for n, as the coordinator
	// would have written it: the PREPARE is consistent in itself (no such
	// record is in etcd, so nothing this stages can commit).
	rid, _ := wire.ParseRoutingIDBytes(targetRID)
	o, _ := keyspace.ParseObject(object)
	rec := record.Record{Kind: o.Kind, Type: o.Type, ObjectGeneration: 1, AuthorityGeneration: 1,
		Owner: record.OwnerRef{ID: "ghost", Generation: 1}, Node: record.NodeRef{RoutingID: coord.Hex(), Address: "ghost:7100"},
		State: record.StateRelocating, Intent: &record.Intent{RelocationID: id.String(), Target: n.Self(),
			TargetNode: record.NodeRef{RoutingID: rid.Hex(), Address: n.Address()}, DeadlineMs: deadline.UnixMilli(), NonceHash: record.HashNonce(nonce)}}
	return &pb.Prepare{Version: wire.Version, RelocationId: id[:], Nonce: nonce,
		Coordinator:   &pb.Fence{OwnerId: "ghost", OwnerGeneration: 1, RoutingId: coord[:], ObjectGeneration: 1, AuthorityGeneration: 1, StoreVersion: 1},
		Target:        &pb.Fence{OwnerId: n.Self().ID, OwnerGeneration: n.Self().Generation, RoutingId: targetRID},
		Participants:  []*pb.Participant{{Object: object, Type: typ, ObjectGeneration: 1, AuthorityGeneration: 1, StoreVersion: 1, Record: rec.Encode()}},
		PayloadLength: uint64(len(payload)), ChunkCount: 1, Crc32C: wire.CRC32C(payload), ApplicationVersion: "1",
		DeadlineUnixMs: deadline.UnixMilli()}
}

func relocationStream(t *testing.T, n *node.Node) rpcpb.PeerService_RelocateClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	s, err := rpcpb.NewPeerServiceClient(dial(t, n)).Relocate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// prepareOnly sends p alone and returns the first answer.
func prepareOnly(t *testing.T, n *node.Node, p *pb.Prepare) *pb.RelocationFrame {
	t.Helper()
	s := relocationStream(t, n)
	if err := s.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: p}}); err != nil {
		t.Fatal(err)
	}
	f, err := s.Recv()
	if err != nil {
		t.Fatalf("PREPARE: %v", err)
	}
	_ = s.CloseSend()
	return f
}

// prepareWithPayload sends p and its one chunk and returns the first answer.
func prepareWithPayload(t *testing.T, n *node.Node, p *pb.Prepare, payload []byte) (rpcpb.PeerService_RelocateClient, *pb.RelocationFrame) {
	t.Helper()
	s := relocationStream(t, n)
	if err := s.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: p}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: p.GetRelocationId(), Index: 0, Data: payload}}}); err != nil {
		t.Fatal(err)
	}
	f, err := s.Recv()
	if err != nil {
		t.Fatalf("PREPARE: %v", err)
	}
	return s, f
}

// Bug 15: a PREPARE that arrives after its deadline is refused
// DEADLINE_EXCEEDED and stages nothing (the driver's side of
// deadline_before_ready.txt; TestFaultDeadlineBeforeReady is the restore
// that ends late).
func TestSeedBug15_PrepareAfterDeadlineRefused(t *testing.T) {
	fm := startFaultMesh(t, 1)
	n := fm.nodes[0]
	rid := fm.routingID(t, n)
	p := rawPrepare(n, rid[:], "actor/list/late", "list", []byte("x"), time.Now().Add(-time.Millisecond))
	if f := prepareOnly(t, n, p); f.GetFailed().GetCode() != pb.Code_CODE_DEADLINE_EXCEEDED {
		t.Fatalf("PREPARE after its deadline: %v, want FAILED DEADLINE_EXCEEDED", f)
	}
	hostsNothing(t, n)
	ta := targetAttempt(t, n, "actor/list/late", 5*time.Second)
	if ta.GetOutcome() != "failed" || ta.GetCode() != pb.Code_CODE_DEADLINE_EXCEEDED {
		t.Errorf("target attempt %s %v", ta.GetOutcome(), ta.GetCode())
	}
}

// Bug 31: timers are restored when the hidden instance is created, before
// READY — a participant whose timers cannot be restored fails the restore
// (DATA_LOST, nothing staged) instead of failing late, after the commit. The
// same payload with valid timers gets READY.
func TestSeedBug31_TimersRestoredAtCreation(t *testing.T) {
	fm := startFaultMesh(t, 1)
	n := fm.nodes[0]
	rid := fm.routingID(t, n)
	typ, err := registry(t).Lookup("ticker")
	if err != nil {
		t.Fatal(err)
	}
	state, err := typ.New().Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	replies := actor.NewReplyTable(time.Minute, 0).Encode()
	timers := actor.NewTimers()
	if err := timers.Set(actor.TimerSpec{Name: "tick", Period: 50 * time.Millisecond, Policy: actor.Skip}, time.Now()); err != nil {
		t.Fatal(err)
	}

	const bad = "actor/ticker/badtimers"
	p := rawPrepare(n, rid[:], bad, "ticker", nil, time.Now().Add(10*time.Second))
	payload := rawPayload(p.GetRelocationId(), bad, "ticker", state, []byte("not timers"), replies)
	p.PayloadLength, p.Crc32C = uint64(len(payload)), wire.CRC32C(payload)
	_, f := prepareWithPayload(t, n, p, payload)
	if f.GetFailed().GetCode() != pb.Code_CODE_DATA_LOST || !strings.Contains(f.GetFailed().GetMessage(), "timers") {
		t.Errorf("restore with corrupt timers: %v, want FAILED DATA_LOST about the timers", f)
	}
	targetAttempt(t, n, bad, 5*time.Second)
	hostsNothing(t, n)

	const good = "actor/ticker/goodtimers"
	p = rawPrepare(n, rid[:], good, "ticker", nil, time.Now().Add(10*time.Second))
	payload = rawPayload(p.GetRelocationId(), good, "ticker", state, timers.Encode(), replies)
	p.PayloadLength, p.Crc32C = uint64(len(payload)), wire.CRC32C(payload)
	s, f := prepareWithPayload(t, n, p, payload)
	if f.GetReady() == nil {
		t.Errorf("restore with valid timers: %v, want READY", f)
	}
	_ = s.CloseSend()
	// No such record exists: the fallback commit fails and the stage is dropped.
	if ta := targetAttempt(t, n, good, 5*time.Second); ta.GetOutcome() == "completed" {
		t.Errorf("a PREPARE from a coordinator that owns nothing committed: %v", ta)
	}
	hostsNothing(t, n)
}

// Bug 34: a relocation stream whose first frame is not PREPARE is refused
// (InvalidArgument), counted, and changes nothing.
func TestSeedBug34_FirstFrameNotPrepareRefused(t *testing.T) {
	fm := startFaultMesh(t, 1)
	n := fm.nodes[0]
	id := wire.NewRelocationID()
	firsts := map[string]*pb.RelocationFrame{
		"STATE": {Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: id[:], Data: []byte("x")}}},
		"DATA": {Frame: &pb.RelocationFrame_Data{Data: &pb.Data{RelocationId: id[:], Request: &pb.CallRequest{Version: wire.Version, Object: "actor/list/x", Method: "append",
			Args: [][]byte{[]byte("v")}, OperationId: id[:]}}}},
		"CUTOVER": {Frame: &pb.RelocationFrame_Cutover{Cutover: &pb.Cutover{RelocationId: id[:]}}},
		"empty":   {},
	}
	for name, f := range firsts {
		s := relocationStream(t, n)
		if err := s.Send(f); err != nil {
			t.Fatal(err)
		}
		_, err := s.Recv()
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("first frame %s: %v, want InvalidArgument", name, err)
		}
	}
	if got := fm.metricSum(t, n, "meshloc_relocation_late_frames_total", nil); got != float64(len(firsts)) {
		t.Errorf("late frames counted: %v, want %d", got, len(firsts))
	}
	hostsNothing(t, n)
	if len(n.Relocations()) != 0 {
		t.Errorf("refused streams left relocations: %v", n.Relocations())
	}
	c := newClient(t, client.Config{Etcd: fm.etcd})
	fill(t, c, "actor/list/x", "v")
}

// Bugs 8 and 9: the requests captured at the seal and sent as DATA are the
// head of the object's mailbox on the target, run after the commit — the
// relocation does not wait for them (a slow replayed request cannot hold up
// finalize) — and they run in the order the source accepted them, before any
// request that reached the target later.
func TestSeedBug08_09_ReplayIsMailboxPrefix(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/slowlist/prefix"
	fill(t, c, obj, "a")
	src := fm.owner(t, obj)
	dst := fm.other(t, src)

	order, calls, reloc := sealScenario(c, src, obj, []string{"q1:700", "q2:700"}, []string{"d1", "d2"}, node.RelocateOptions{Target: dst.Self().ID})
	st := waitRelocation(t, reloc, 30*time.Second)
	ended := time.Now()
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)
	late := launch(c, obj, "append", "n1")
	order, calls = append(order, "n1"), append(calls, late)
	for i, ch := range calls {
		r := await(t, order[i], ch)
		if length(t, r) != i+2 {
			t.Errorf("%s answered length %d, want %d", order[i], length(t, r), i+2)
		}
		if order[i] == "q2" && !r.at.After(ended.Add(500*time.Millisecond)) {
			t.Errorf("the relocation ended %v before q2 (1.4 s of replay) was answered: it waited for the replay", r.at.Sub(ended))
		}
	}
	ta := targetAttempt(t, dst, obj, 5*time.Second)
	if ta.GetOutcome() != "completed" {
		t.Errorf("target attempt %v", ta)
	}
	if items := readItems(t, c, obj); strings.Join(items, ",") != "a,c0,q1,q2,d1,d2,n1" {
		t.Errorf("items %q", items)
	}
}

// Bugs 12 and 13: drain begins while the target restores. The restore must
// not finish staging: the target answers SHUTTING_DOWN (not READY, not
// DATA_LOST), drops the stage, and counts a shutdown; the source keeps the
// object.
func TestSeedBug12_13_DrainDuringRestoreIsShuttingDown(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/drainrestore"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetBeforeReady, "sleep:1s")

	reloc := relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID})
	deadline := time.Now().Add(3 * time.Second)
	for dst.Hosted() == 0 { // the hidden instance exists: the restore is under way
		if time.Now().After(deadline) {
			t.Fatal("the target never restored")
		}
		time.Sleep(5 * time.Millisecond)
	}
	dst.SetDraining(true)
	st := waitRelocation(t, reloc, 30*time.Second)
	ta := targetAttempt(t, dst, obj, 5*time.Second)
	if ta.GetOutcome() != "shutdown" || ta.GetCode() != pb.Code_CODE_SHUTTING_DOWN {
		t.Errorf("target attempt: %s %v (%s), want shutdown SHUTTING_DOWN: a restore that ends after drain began must not stage", ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
	}
	wantOutcome(t, st, "aborted", pb.Code_CODE_SHUTTING_DOWN)
	fm.serves(t, src, c, obj)
	hostsNothing(t, dst)
	fm.checkOutcomeMetric(t, dst, "target", "shutdown")
}

// Bug 13: drain begins while the target assembles the chunks: the assembly
// is refused SHUTTING_DOWN, not DATA_LOST; the source keeps the object.
func TestSeedBug13_DrainDuringAssemblyIsShuttingDown(t *testing.T) {
	fm := startFaultMesh(t, 2, func(_ int, c *node.Config) { c.ChunkBytes = 64 << 10 })
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/blob/drainassembly"
	r, err := c.Call(context.Background(), obj, "fill", "262144")
	if err != nil {
		t.Fatal(err)
	}
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.SourceChunk, "sleep:1500ms@2")

	reloc := relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID})
	time.Sleep(400 * time.Millisecond) // chunk 1 sent; the source holds chunk 2
	dst.SetDraining(true)
	st := waitRelocation(t, reloc, 30*time.Second)
	ta := targetAttempt(t, dst, obj, 5*time.Second)
	if ta.GetOutcome() != "shutdown" || ta.GetCode() != pb.Code_CODE_SHUTTING_DOWN {
		t.Errorf("target attempt: %s %v (%s), want shutdown SHUTTING_DOWN", ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
	}
	if st.GetOutcome() != "aborted" {
		t.Errorf("relocation %s %v (%s), want aborted", st.GetOutcome(), st.GetCode(), st.GetMessage())
	}
	if st.GetCode() != pb.Code_CODE_SHUTTING_DOWN {
		t.Logf("note: the source reports %v (%s), not the target's SHUTTING_DOWN", st.GetCode(), st.GetMessage())
	}
	fm.serves(t, src, c, obj)
	hostsNothing(t, dst)
	h, err := c.Call(context.Background(), obj, "hash")
	if err != nil || string(h.Payload) != string(r.Payload) {
		t.Errorf("blob after the aborted relocation: %s %v, want %s", h.Payload, err, r.Payload)
	}
	fm.checkOutcomeMetric(t, dst, "target", "shutdown")
}

// Bug 14: a restore that fails leaves no stage behind: the target hosts
// nothing, and a later relocation of the same object to it completes.
func TestSeedBug14_NoStageLeftAfterFailedRestore(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/slowlist/poison"
	fill(t, c, obj, "a", "b")
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	fill(t, c, obj) // nothing
	if _, err := c.Call(context.Background(), obj, "poison"); err != nil {
		t.Fatal(err)
	}
	st := waitRelocation(t, relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID}), 30*time.Second)
	wantOutcome(t, st, "aborted", pb.Code_CODE_DATA_LOST)
	hostsNothing(t, dst)
	if ta := targetAttempt(t, dst, obj, 5*time.Second); ta.GetCode() != pb.Code_CODE_DATA_LOST || !strings.Contains(ta.GetMessage(), "restore") {
		t.Errorf("target attempt %s %v (%s), want DATA_LOST from the restore", ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
	}
	fm.serves(t, src, c, obj)

	if _, err := c.Call(context.Background(), obj, "heal"); err != nil {
		t.Fatal(err)
	}
	st = waitRelocation(t, relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID}), 30*time.Second)
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)
	fm.serves(t, dst, c, obj)
	if items := readItems(t, c, obj); strings.Join(items, ",") != "a,b" {
		t.Errorf("items %q", items)
	}
}

// Bug 33: metrics count one outcome per attempt, the first; a node that
// stops while its relocation settles counts it as shutdown — at once, not
// after the deadline — and the target, which committed, keeps the object.
func TestSeedBug33_StopMidSettleCountsShutdown(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/stopsettle"
	fill(t, c, obj, "a", "b")
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetBeforeCommit, "sleep:1s")

	reloc := relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID, Timeout: 5 * time.Second})
	waitPhase(t, src, obj, "source", "settling", 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	st := waitRelocation(t, reloc, 15*time.Second)
	if took := time.Since(stopped); st.GetOutcome() != "shutdown" || took > 2*time.Second {
		t.Errorf("source relocation ended %s %v (%s) %v after Stop returned, want shutdown at once", st.GetOutcome(), st.GetCode(), st.GetMessage(), took.Round(time.Millisecond))
	}
	fm.checkOutcomeMetric(t, src, "source", "shutdown")
	if ta := targetAttempt(t, dst, obj, 5*time.Second); ta.GetOutcome() != "completed" {
		t.Errorf("target attempt %s %v (%s), want completed", ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
	}
	fm.checkOutcomeMetric(t, dst, "target", "completed")
	if items := readItems(t, c, obj); strings.Join(items, ",") != "a,b" {
		t.Errorf("items %q after the source stopped", items)
	}
}
