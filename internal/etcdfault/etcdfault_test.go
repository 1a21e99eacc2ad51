package etcdfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/etcdtest"
)

// TestMain fails a successful run that leaves a goroutine behind. It waits up
// to 15 s for them to end: after an embedded member stops, its peers' HTTP
// connections to it end only at rafthttp's 5 s read timeout (etcd's
// timeoutConn re-arms the read deadline net/http sets to abort a read).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
				code = 1
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	os.Exit(code)
}

func endpoints(srvs []*embedetcd.Server) []string {
	eps := make([]string, len(srvs))
	for i, s := range srvs {
		eps[i] = s.Endpoint()
	}
	return eps
}

func memberID(s *embedetcd.Server) uint64 { return uint64(s.Etcd().Server.MemberID()) }

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// deadEndpoint is a client URL nothing listens on.
func deadEndpoint(t *testing.T) string {
	return fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
}

// One 3-member cluster for the read-only checks and the leader moves.
func TestMembersLeaderMoveLeader(t *testing.T) {
	srvs := etcdtest.Cluster(t, 3)
	eps := endpoints(srvs)
	ctx := testCtx(t, time.Minute)
	if err := WaitHealthy(ctx, eps); err != nil {
		t.Fatal(err)
	}

	ms, err := Members(ctx, etcdtest.Client(t, eps...))
	if err != nil || len(ms) != 3 {
		t.Fatalf("Members = %+v, %v", ms, err)
	}
	for i, m := range ms {
		if m.Name != fmt.Sprintf("m%d", i) || m.ID != memberID(srvs[i]) || m.Learner ||
			len(m.ClientURLs) != 1 || m.ClientURLs[0] != eps[i] || len(m.PeerURLs) != 1 {
			t.Fatalf("member %d = %+v", i, m)
		}
	}

	lead, ep, err := Leader(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	li := -1
	for i, s := range srvs {
		if memberID(s) == lead {
			li = i
		}
		if got := uint64(s.Etcd().Server.Leader()); got != lead {
			t.Fatalf("member %d follows %x, Leader says %x", i, got, lead)
		}
	}
	if li < 0 || ep != eps[li] {
		t.Fatalf("Leader = %x at %s, not a member's endpoint", lead, ep)
	}
	// Only followers (and a dead endpoint) asked: no leader among them.
	var followers []string
	for i := range eps {
		if i != li {
			followers = append(followers, eps[i])
		}
	}
	// (A dead endpoint costs at most ProbeTimeout, the probes run side by
	// side; not timed here: on a loaded machine a live follower's answer
	// alone can take seconds.)
	if _, _, err := Leader(ctx, append(followers, deadEndpoint(t))); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader of followers = %v, want ErrNoLeader", err)
	}
	// The leader is found with a dead endpoint among the others.
	if l, _, err := Leader(ctx, append([]string{deadEndpoint(t)}, eps...)); err != nil || l != lead {
		t.Fatalf("Leader with a dead endpoint = %x, %v; want %x", l, err, lead)
	}

	// To a random other member.
	from, to, err := MoveLeader(ctx, eps, 0)
	if err != nil || from != lead || to == lead || to == 0 {
		t.Fatalf("MoveLeader(0) = %x → %x, %v (leader was %x)", from, to, err, lead)
	}
	if now, _, err := Leader(ctx, eps); err != nil || now != to {
		t.Fatalf("after MoveLeader: leader %x, %v; want %x", now, err, to)
	}
	// Back to the first leader, by id.
	if from2, to2, err := MoveLeader(ctx, eps, lead); err != nil || from2 != to || to2 != lead {
		t.Fatalf("MoveLeader(%x) = %x → %x, %v", lead, from2, to2, err)
	}
	if now, _, err := Leader(ctx, eps); err != nil || now != lead {
		t.Fatalf("after MoveLeader back: leader %x, %v; want %x", now, err, lead)
	}
	// To the leader itself: nothing to do.
	if f, tt, err := MoveLeader(ctx, eps, lead); err != nil || f != lead || tt != lead {
		t.Fatalf("MoveLeader to the leader = %x → %x, %v", f, tt, err)
	}
	if _, _, err := MoveLeader(ctx, eps, 12345); !errors.Is(err, ErrNotMember) {
		t.Fatalf("MoveLeader to a stranger = %v, want ErrNotMember", err)
	}
	if err := HashKVEqual(ctx, eps, 0); err != nil {
		t.Fatal(err)
	}
}

func TestHashKVEqual(t *testing.T) {
	srvs := etcdtest.Cluster(t, 3)
	eps := endpoints(srvs)
	ctx := testCtx(t, time.Minute)
	cli := etcdtest.Client(t, eps...)
	var rev int64
	for i := range 20 {
		resp, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if err := HashKVEqual(ctx, eps, 0); err != nil {
		t.Fatalf("current revision: %v", err)
	}
	if err := HashKVEqual(ctx, eps, rev-5); err != nil {
		t.Fatalf("revision %d: %v", rev-5, err)
	}

	// A revision not reached yet is waited for.
	done := make(chan error, 1)
	go func() { done <- HashKVEqual(ctx, eps, rev+1) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("HashKVEqual of a future revision returned %v before it was reached", err)
	default:
	}
	if _, err := cli.Put(ctx, "k-last", "v"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("future revision: %v", err)
	}

	// Another store at the same revision with other contents: a mismatch
	// naming it.
	other := etcdtest.Single(t)
	ocli := etcdtest.Client(t, other.Endpoint())
	for i := range 20 {
		if _, err := ocli.Put(ctx, fmt.Sprintf("k%d", i), "w"); err != nil {
			t.Fatal(err)
		}
	}
	err := HashKVEqual(ctx, append(eps, other.Endpoint()), rev)
	var me *HashMismatchError
	if !errors.Is(err, ErrHashMismatch) || !errors.As(err, &me) {
		t.Fatalf("HashKVEqual with another store = %v, want a *HashMismatchError", err)
	}
	if d := me.Differing(); me.Revision != rev || len(me.Members) != 4 || len(d) != 1 || d[0].Endpoint != other.Endpoint() || d[0].Name != "t0" || me.Members[0].Name == "" ||
		d[0].MemberID != memberID(other) || !strings.Contains(err.Error(), other.Endpoint()) {
		t.Fatalf("mismatch: %+v (differing %+v): %v", me, d, err)
	}
	t.Log(err)

	// A member that cannot answer is named.
	dead := deadEndpoint(t)
	if err := HashKVEqual(ctx, append(eps, dead), rev); err == nil || !strings.Contains(err.Error(), dead) {
		t.Fatalf("HashKVEqual with a dead endpoint = %v", err)
	}
}

func TestWaitHealthy(t *testing.T) {
	srvs := etcdtest.Cluster(t, 3)
	eps := endpoints(srvs)
	ctx := testCtx(t, time.Minute)
	if err := WaitHealthy(ctx, eps); err != nil {
		t.Fatal(err)
	}
	if err := Healthy(ctx, eps); err != nil {
		t.Fatal(err)
	}

	// Stop the leader: the other two elect another and are healthy again;
	// the stopped one is named as long as it is asked about.
	lead, _, err := Leader(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	var rest []string
	for i, s := range srvs {
		if memberID(s) == lead {
			s.Close()
			if err := Healthy(ctx, eps); err == nil || !strings.Contains(err.Error(), eps[i]) {
				t.Fatalf("Healthy with a stopped member = %v", err)
			}
			continue
		}
		rest = append(rest, eps[i])
	}
	if err := WaitHealthy(ctx, rest); err != nil {
		t.Fatal(err)
	}
	if now, _, err := Leader(ctx, rest); err != nil || now == lead {
		t.Fatalf("leader after the old one stopped: %x, %v", now, err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := WaitHealthy(short, eps); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitHealthy with a stopped member = %v, want DeadlineExceeded", err)
	}
}
