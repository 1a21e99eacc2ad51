package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
)

// say sends a message in the room through s and returns its number.
func say(t *testing.T, s *client.Session, text string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := s.Call(ctx, "say", text)
	if err != nil {
		t.Fatalf("say %s: %v", text, err)
	}
	var v struct{ N uint64 }
	if err := json.Unmarshal(r.Payload, &v); err != nil {
		t.Fatal(err)
	}
	return v.N
}

// recvN reads k pushes of s and returns the room numbers they carry.
func recvN(t *testing.T, s *client.Session, k int) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []uint64
	for range k {
		p, err := s.Recv(ctx)
		if err != nil {
			t.Fatalf("recv after %v: %v", out, err)
		}
		var m builtin.RoomMessage
		if err := json.Unmarshal(p.Payload, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.N)
	}
	return out
}

func ownerNode(t *testing.T, m *mesh, name string) *node.Node {
	t.Helper()
	obj, _ := keyspace.ParseObject(name)
	snap, err := authority.New(m.etcd, keyspace.Default()).Read(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range m.nodes {
		if n.Self() == snap.Record.Owner {
			return n
		}
	}
	t.Fatalf("%s owned by %s, no node of the mesh", name, snap.Record.Owner)
	return nil
}

// Two sessions on one room: each publish reaches both, in order, once;
// the room moves between nodes while they talk, and nothing is lost or
// repeated; calls keep their order.
func TestSessionsFollowTheirObject(t *testing.T) {
	m := startMesh(t, 3)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const room = "actor/room/r1"
	s1, err := c.OpenSession(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := c.OpenSession(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var want []uint64
	for i := range 30 {
		s := s1
		if i%2 == 1 {
			s = s2
		}
		n := say(t, s, fmt.Sprintf("m%d", i))
		want = append(want, n)
		if i%7 == 3 {
			owner := ownerNode(t, m, room)
			st, err := owner.Relocate(ctx, room, node.RelocateOptions{})
			if err != nil || st.GetOutcome() != "completed" {
				t.Fatalf("relocate: %v %v", st, err)
			}
		}
	}
	for i, w := range want {
		if w != uint64(i+1) {
			t.Fatalf("say numbers %v: not 1..30 in order", want)
		}
	}
	for _, s := range []*client.Session{s1, s2} {
		if got := recvN(t, s, len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pushes %v, want %v", got, want)
		}
	}
	if tok := s1.Token(); tok.ReceivedPush != 30 || tok.LastCall != 15 {
		t.Errorf("token %+v", tok)
	}
}

// The gateway of a session stops: the client resumes on another one by
// itself, and its calls and pushes go on, none lost or repeated.
func TestSessionResumesElsewhere(t *testing.T) {
	m := startMesh(t, 3)
	c := newClient(t, client.Config{Nodes: m.addrs()[1:]}) // gateways n2 and n3
	ctx := context.Background()
	const room = "actor/room/r2"
	s, err := c.OpenSession(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 {
		say(t, s, fmt.Sprintf("a%d", i))
	}
	if got := recvN(t, s, 3); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("pushes %v", got)
	}
	gw := s.Gateway()
	var gwNode *node.Node
	for _, n := range m.nodes {
		if n.Address() == gw {
			gwNode = n
		}
	}
	if owner := ownerNode(t, m, room); owner == gwNode {
		// Stopping the room's owner would lose its state (a memory
		// object): move it away from the gateway first.
		other := m.nodes[0]
		if other == gwNode {
			other = m.nodes[1]
		}
		if st, err := owner.Relocate(ctx, room, node.RelocateOptions{Target: other.Self().ID}); err != nil || st.GetOutcome() != "completed" {
			t.Fatalf("relocate: %v %v", st, err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := gwNode.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		say(t, s, fmt.Sprintf("b%d", i))
	}
	if got := recvN(t, s, 7); fmt.Sprint(got) != "[4 5 6 7 8 9 10]" {
		t.Fatalf("pushes after the resume %v", got)
	}
	if s.Gateway() == gw {
		t.Errorf("still on %s", gw)
	}
	// An explicit resume from the token (another process would do this).
	tok := s.Token()
	s.Close()
	s2, err := c.ResumeSession(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n := say(t, s2, "c"); n != 11 {
		t.Fatalf("say after ResumeSession: %d", n)
	}
	if got := recvN(t, s2, 1); fmt.Sprint(got) != "[11]" {
		t.Fatalf("pushes after ResumeSession %v", got)
	}
}

// A memory object's owner dies: its state, and its sessions' journals, are
// lost; the session ends with state lost instead of going on silently.
func TestSessionStateLost(t *testing.T) {
	m := startMesh(t, 3)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx := context.Background()
	const room = "actor/room/r3"
	var s *client.Session
	for range 10 { // a session whose gateway is not the room's owner
		var err error
		if s, err = c.OpenSession(ctx, room); err != nil {
			t.Fatal(err)
		}
		say(t, s, "x")
		if ownerNode(t, m, room).Address() != s.Gateway() {
			break
		}
		s.Close()
	}
	defer s.Close()
	owner := ownerNode(t, m, room)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := owner.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	for s.Err() == nil && cctx.Err() == nil {
		if _, err := s.Call(cctx, "say", "y"); err != nil {
			break
		}
	}
	if err := s.Err(); err == nil || !errorsIsCode(err, "state_lost") {
		t.Fatalf("session after its memory object was lost: %v", err)
	}
}

func errorsIsCode(err error, code string) bool {
	return err != nil && (strings.Contains(err.Error(), code) || strings.Contains(err.Error(), "STATE_LOST"))
}

// A call refused before it runs (an unknown method) leaves a gap in the
// session's call numbers: the next calls run, and a resume from a token
// that counts the refused call goes on.
func TestSessionRefusedCallLeavesGap(t *testing.T) {
	m := startMesh(t, 1)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx := context.Background()
	s, err := c.OpenSession(ctx, "actor/room/gap")
	if err != nil {
		t.Fatal(err)
	}
	say(t, s, "a")
	if _, err := s.Call(ctx, "nope"); !errorsIsCode(err, "unknown_method") {
		t.Fatalf("unknown method: %v", err)
	}
	if n := say(t, s, "b"); n != 2 {
		t.Fatalf("say after the refused call: %d", n)
	}
	tok := s.Token()
	s.Close()
	s2, err := c.ResumeSession(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n := say(t, s2, "c"); n != 3 || tok.LastCall != 3 {
		t.Fatalf("say after the resume: %d (token %+v)", n, tok)
	}
	if got := recvN(t, s2, 3); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("pushes %v", got)
	}
}

// The gateway and the owner of a memory room stop together: the client
// resumes on another gateway with its token, which names the room's life;
// the room there is a new life, so the session ends STATE_LOST (the new
// life's fence in hand) instead of going on silently in the new one.
func TestSessionResumeOnRecreatedObject(t *testing.T) {
	m := startMesh(t, 3)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx := context.Background()
	const room = "actor/room/r5"
	var s *client.Session
	for range 20 { // a session whose gateway is the room's owner
		var err error
		if s, err = c.OpenSession(ctx, room); err != nil {
			t.Fatal(err)
		}
		say(t, s, "x")
		if ownerNode(t, m, room).Address() == s.Gateway() {
			break
		}
		s.Close()
	}
	defer s.Close()
	before, _ := s.Fence()
	tok := s.Token()
	if tok.ObjectGeneration != before.ObjectGeneration || before.ObjectGeneration == 0 {
		t.Fatalf("token %+v, fence %+v", tok, before)
	}
	owner := ownerNode(t, m, room)
	if owner.Address() != s.Gateway() {
		t.Skip("the room's owner never was the session's gateway")
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := owner.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	for s.Err() == nil && cctx.Err() == nil {
		if _, err := s.Call(cctx, "say", "y"); err != nil {
			break
		}
	}
	if err := s.Err(); !errorsIsCode(err, "state_lost") {
		t.Fatalf("session resumed on a re-created room: %v", err)
	}
	if after, ok := s.Fence(); !ok || after.ObjectGeneration <= before.ObjectGeneration {
		t.Errorf("fence after STATE_LOST %+v, before %+v: want the new life's", after, before)
	}
	// The old token, resumed by hand, says the same.
	if _, err := c.ResumeSession(cctx, tok); !errorsIsCode(err, "state_lost") {
		t.Errorf("resume of the old token: %v, want STATE_LOST", err)
	}
}

// A token resumed by another process may be older than the object's
// journal (calls after it ran; their replies went with the process that
// sent them): the resumed session numbers its calls on after them.
func TestSessionResumeFromOlderToken(t *testing.T) {
	m := startMesh(t, 2)
	ctx := context.Background()
	const room = "actor/room/r6"
	s, err := newClient(t, client.Config{Nodes: m.addrs()}).OpenSession(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	say(t, s, "a")
	old := s.Token()
	say(t, s, "b")
	s.Close()
	r, err := newClient(t, client.Config{Nodes: m.addrs()}).ResumeSession(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := say(t, r, "c"); n != 3 {
		t.Fatalf("say after resuming an older token: message %d, want 3", n)
	}
	if tok := r.Token(); tok.LastCall != 3 {
		t.Fatalf("token after: %+v", tok)
	}
}
