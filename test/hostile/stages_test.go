package hostile_test

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Three streams each announce a 256 MiB payload and send one 1 MiB chunk,
// then stop sending: the target's memory grows with what was sent, not
// with what was announced (its heap stays under 100 MiB), and each stage
// is dropped at its deadline.
func TestAnnouncementsDoNotAllocate(t *testing.T) {
	c := cluster(t, 2, chaos.Config{})
	cl := newClient(t, c)
	add(t, cl, "actor/counter/c4", 1)
	src, dst := ownerOf(t, c, "actor/counter/c4")
	cc := dial(t, owners(t, c)[dst].Address)
	http := c.Node(dst).HTTP
	heap0 := metric(t, http, "go_memstats_heap_inuse_bytes")
	var streams []*stream
	for range 3 {
		f := newForgery(t, c, src, dst, "actor/counter/c4")
		f.selfIntent, f.announce, f.chunk = true, 256<<20, 1<<20
		f.deadline = time.Now().Add(4 * time.Second)
		p, _ := f.prepare(t)
		data := make([]byte, 1<<20)
		_, _ = rand.Read(data)
		s := openStream(t, cc)
		s.send(t, prepareFrame(p))
		s.send(t, chunkFrame(&pb.StateChunk{RelocationId: f.id[:], Index: 0, Data: data, Crc32C: proto.Uint32(wire.CRC32C(data))}))
		streams = append(streams, s)
	}
	time.Sleep(time.Second) // the chunks land
	for _, s := range streams {
		if fr := s.recv(10 * time.Millisecond); fr != nil {
			t.Fatalf("a stage ended early: %v", fr)
		}
	}
	heap := metric(t, http, "go_memstats_heap_inuse_bytes")
	rss := metric(t, http, "process_resident_memory_bytes")
	t.Logf("target heap in use %.1f MiB (%.1f MiB before), RSS %.1f MiB, with 3 × 256 MiB announced and 3 × 1 MiB sent",
		heap/(1<<20), heap0/(1<<20), rss/(1<<20))
	if heap > 100<<20 {
		t.Fatalf("target heap %.0f MiB: announcements were allocated", heap/(1<<20))
	}
	for i, s := range streams {
		fr := s.recv(10 * time.Second)
		if failedCode(fr) != pb.Code_CODE_DEADLINE_EXCEEDED {
			t.Fatalf("stream %d: %v, want FAILED deadline_exceeded when the sender stops", i, fr)
		}
	}
}

// Stages are bounded per peer and per node, and in how far ahead their
// deadline may lie: beyond a bound a PREPARE is refused at once with
// resource_exhausted (hundreds of them on one connection change nothing),
// and the stages in flight end at their deadline; the node's goroutines
// come back down.
func TestStagesBounded(t *testing.T) {
	c := cluster(t, 3, chaos.Config{NodeArgs: []string{"--max-incoming-relocations", "4", "--max-incoming-relocations-per-peer", "2"}})
	cl := newClient(t, c)
	add(t, cl, "actor/counter/c5", 1)
	_, dst := ownerOf(t, c, "actor/counter/c5")
	os := owners(t, c)
	var peers []string
	for id := range os {
		if id != dst {
			peers = append(peers, id)
		}
	}
	cc := dial(t, os[dst].Address)
	http := c.Node(dst).HTTP
	g0 := metric(t, http, "go_goroutines")
	// start opens a stage that a peer claims, PREPARE only, and returns
	// the node's answer within wait (nil: the stage lives).
	start := func(peer string, ahead time.Duration, wait time.Duration) (*stream, *pb.RelocationFrame) {
		f := newForgery(t, c, peer, dst, "actor/counter/c5")
		claim := os[peer]
		f.selfIntent, f.claim, f.announce = true, &claim, 8<<20
		f.deadline = time.Now().Add(ahead)
		p, _ := f.prepare(t)
		s := openStream(t, cc)
		s.send(t, prepareFrame(p))
		return s, s.recv(wait)
	}
	// The live stages hold the slots until their deadline: 8 s ahead (the
	// node allows its relocation timeout, 10 s); the PREPAREs beyond the
	// bounds are sent while they surely live.
	const ahead = 8 * time.Second
	liveUntil := time.Now().Add(ahead)
	var live []*stream
	for i := range 4 {
		s, fr := start(peers[i/2], ahead, 200*time.Millisecond)
		if fr != nil {
			t.Fatalf("stage %d refused: %v", i, fr)
		}
		live = append(live, s)
	}
	if _, fr := start(peers[0], ahead, 5*time.Second); failedCode(fr) != pb.Code_CODE_RESOURCE_EXHAUSTED {
		t.Fatalf("a third stage of one peer: %v, want resource_exhausted", fr)
	}
	refused, sent := 0, 0
	for ; sent < 200 && time.Until(liveUntil) > 2*time.Second; sent++ {
		if _, fr := start(peers[1], ahead, 1500*time.Millisecond); failedCode(fr) == pb.Code_CODE_RESOURCE_EXHAUSTED {
			refused++
		}
	}
	if refused != sent || sent < 20 {
		t.Fatalf("%d of %d stages beyond the bounds refused (want all, and at least 20 sent)", refused, sent)
	}
	t.Logf("goroutines on the target: %.0f before, %.0f with 4 stages in flight and %d refused", g0, metric(t, http, "go_goroutines"), sent+1)
	for i, s := range live {
		if fr := s.recv(time.Until(liveUntil) + 10*time.Second); failedCode(fr) != pb.Code_CODE_DEADLINE_EXCEEDED {
			t.Fatalf("stage %d: %v, want deadline_exceeded", i, fr)
		}
	}
	if _, fr := start(peers[0], time.Hour, 5*time.Second); failedCode(fr) != pb.Code_CODE_RESOURCE_EXHAUSTED {
		t.Fatalf("a deadline an hour ahead: %v, want resource_exhausted", fr)
	}
	eventually(t, 10*time.Second, "goroutines back down", func() error {
		if g := metric(t, http, "go_goroutines"); g > g0+20 {
			return fmt.Errorf("%.0f goroutines, %.0f before", g, g0)
		}
		return nil
	})
}

// DATA out of order (a gap) aborts the stage at once with protocol_error:
// nothing is committed.
func TestOutOfOrderDataAborts(t *testing.T) {
	c := cluster(t, 2, chaos.Config{})
	cl := newClient(t, c)
	add(t, cl, "actor/counter/c6", 4)
	src, dst := ownerOf(t, c, "actor/counter/c6")
	before := etcdState(t, c, "")
	f := newForgery(t, c, src, dst, "actor/counter/c6")
	f.selfIntent = true
	f.states["actor/counter/c6"] = counterState(1)
	p, chunks := f.prepare(t)
	s := openStream(t, dial(t, owners(t, c)[dst].Address))
	s.send(t, prepareFrame(p))
	for _, ch := range chunks {
		s.send(t, chunkFrame(ch))
	}
	if fr := s.recv(10 * time.Second); fr.GetReady() == nil {
		t.Fatalf("want READY, got %v", fr)
	}
	for _, seq := range []uint32{0, 5} {
		op := wire.NewOperationID()
		s.send(t, &pb.RelocationFrame{Frame: &pb.RelocationFrame_Data{Data: &pb.Data{RelocationId: f.id[:], Sequence: seq,
			Request: &pb.CallRequest{Version: wire.Version, Object: "actor/counter/c6", Method: "add", Args: [][]byte{[]byte("1")}, OperationId: op[:]}}}})
	}
	fr := s.recv(5 * time.Second)
	if failedCode(fr) != pb.Code_CODE_PROTOCOL_ERROR {
		t.Fatalf("DATA 5 after 0: %v, want FAILED protocol_error", fr)
	}
	t.Logf("refused: %s", fr.GetFailed().GetMessage())
	if after := etcdState(t, c, ""); !equalState(before, after) {
		t.Fatalf("etcd changed: %v", diffState(before, after))
	}
	if v, by := value(t, cl, "actor/counter/c6"); v != 4 || by != src {
		t.Fatalf("c6 = %d by %s, want 4 by %s", v, by, src)
	}
}

// Relocation ids are public (etcd lists them while relocations are paced):
// a stranger who sends the target a PREPARE under an id first — refused —
// leaves nothing that stops the PREPARE of the source that knows the
// nonce: it is staged (READY), not refused as "repeated with other bytes".
func TestPoisonedIDDoesNotStopTheRealPrepare(t *testing.T) {
	c := cluster(t, 2, chaos.Config{})
	cl := newClient(t, c)
	add(t, cl, "actor/counter/c7", 1)
	src, dst := ownerOf(t, c, "actor/counter/c7")
	cc := dial(t, owners(t, c)[dst].Address)
	genuine := newForgery(t, c, src, dst, "actor/counter/c7")
	genuine.selfIntent = true
	genuine.states["actor/counter/c7"] = counterState(1)
	p, chunks := genuine.prepare(t)

	// The stranger: the same id, its own nonce, a target fence that is
	// not the target's: refused.
	poison := newForgery(t, c, src, dst, "actor/counter/c7")
	poison.id = genuine.id
	poison.target.Generation++
	pp, _ := poison.prepare(t)
	s := openStream(t, cc)
	s.send(t, prepareFrame(pp))
	if fr := s.recv(10 * time.Second); fr.GetFailed() == nil {
		t.Fatalf("the stranger's PREPARE: %v, want FAILED", fr)
	} else {
		t.Logf("the stranger's PREPARE: %v %s", fr.GetFailed().GetCode(), fr.GetFailed().GetMessage())
	}

	s = openStream(t, cc)
	s.send(t, prepareFrame(p))
	for _, ch := range chunks {
		s.send(t, chunkFrame(ch))
	}
	if fr := s.recv(10 * time.Second); fr.GetReady() == nil {
		t.Fatalf("the genuine PREPARE after the stranger's: %v, want READY", fr)
	}
}
