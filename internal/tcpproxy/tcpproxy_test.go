package tcpproxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a real TCP server behind the proxy. Each connection's bytes are
// recorded (with the time they arrived) and, if echo, written back.
type server struct {
	ln   net.Listener
	echo bool
	wg   sync.WaitGroup

	mu      sync.Mutex
	conns   []net.Conn
	got     []byte
	arrived []time.Time // arrival time of each Read
}

func newServer(t *testing.T, echo bool) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, echo: echo}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *server) serve(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			s.mu.Lock()
			s.got = append(s.got, buf[:n]...)
			s.arrived = append(s.arrived, time.Now())
			s.mu.Unlock()
			if s.echo {
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *server) received() ([]byte, []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.got...), append([]time.Time(nil), s.arrived...)
}

// conn is the server side of the i-th connection.
func (s *server) conn(t *testing.T, i int) net.Conn {
	t.Helper()
	waitUntil(t, "server connection", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) > i
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[i]
}

func (s *server) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *server) waitReceived(t *testing.T, n int) []byte {
	t.Helper()
	waitUntil(t, "server received bytes", func() bool { b, _ := s.received(); return len(b) >= n })
	b, _ := s.received()
	return b
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitStats waits until the proxy's counters satisfy ok: a counter is
// raised after the write it counts returned, so the peer may have read the
// bytes a moment before.
func waitStats(t *testing.T, p *Proxy, ok func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st := p.Stats(); !ok(st); st = p.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v (after 10s)", st)
		}
		time.Sleep(time.Millisecond)
	}
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readFull(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func write(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// A rate of 0 (here after a rate of 1) is a clean forward: 1 MiB of random
// bytes comes back unchanged through an echo server, and Stats counts it.
func TestForwardClean(t *testing.T) {
	s := newServer(t, true)
	p := newProxy(t, s.ln.Addr().String())
	p.SetDuplicateRate(1)
	p.SetCorruptRate(1)
	p.SetDuplicateRate(0)
	p.SetCorruptRate(0)
	c := dial(t, p)
	want := make([]byte, 1<<20)
	rand.Read(want)
	var wg sync.WaitGroup
	wg.Go(func() { c.Write(want) })
	got := readFull(t, c, len(want))
	wg.Wait()
	if !bytes.Equal(got, want) {
		t.Fatal("echo differs from what was sent")
	}
	waitStats(t, p, func(st Stats) bool { return st == Stats{Accepted: 1, BytesToServer: 1 << 20, BytesToClient: 1 << 20} })
}

func TestDelayPerDirection(t *testing.T) {
	const d = 400 * time.Millisecond
	s := newServer(t, true)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p)
	// roundTrip sends one byte and returns how long it took to reach the
	// server, and then to come back.
	roundTrip := func(b byte) (there, back time.Duration) {
		t.Helper()
		_, before := s.received()
		t0 := time.Now()
		write(t, c, []byte{b})
		if got := readFull(t, c, 1); got[0] != b {
			t.Fatalf("echo %q, want %q", got, b)
		}
		t2 := time.Now()
		_, arrived := s.received()
		if len(arrived) != len(before)+1 {
			t.Fatalf("server reads: %d, want %d", len(arrived), len(before)+1)
		}
		t1 := arrived[len(arrived)-1]
		return t1.Sub(t0), t2.Sub(t1)
	}
	p.SetDelays(d, 0)
	if there, back := roundTrip('a'); there < d || back >= d/2 {
		t.Errorf("toServer delay: there %s (want ≥ %s), back %s (want ≈ 0)", there, d, back)
	}
	p.SetDelays(0, d)
	if there, back := roundTrip('b'); there >= d/2 || back < d {
		t.Errorf("toClient delay: there %s (want ≈ 0), back %s (want ≥ %s)", there, back, d)
	}
	p.SetDelay(d / 2)
	if there, back := roundTrip('c'); there < d/2 || back < d/2 {
		t.Errorf("SetDelay: there %s, back %s (want both ≥ %s)", there, back, d/2)
	}
	p.SetDelay(0)
	if there, back := roundTrip('d'); there >= d/2 || back >= d/2 {
		t.Errorf("no delay: there %s, back %s", there, back)
	}
}

// A delay is a latency: many buffers in flight at once are each delayed
// once, not one after the other, and never reordered, even while the delay
// changes under them.
func TestDelayKeepsOrder(t *testing.T) {
	s := newServer(t, true)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p)
	p.SetDelay(100 * time.Millisecond)
	var sent []byte
	start := time.Now()
	for i := range 40 {
		b := []byte{byte(i), byte(i >> 8)}
		write(t, c, b)
		sent = append(sent, b...)
		time.Sleep(time.Millisecond) // separate buffers
	}
	got := readFull(t, c, len(sent))
	if el := time.Since(start); el > 2*time.Second { // 40 × 2 × 100 ms if delays added up
		t.Errorf("40 small writes with a 100ms delay each way took %s", el)
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("reordered: %v, want %v", got, sent)
	}
	// Shrinking and growing delays: a later buffer due earlier waits for
	// its predecessor.
	sent = sent[:0]
	for i := range 60 {
		p.SetDelays(time.Duration(60-i)*time.Millisecond, time.Duration(i%7)*time.Millisecond)
		b := []byte{byte(i), 0xaa, byte(i)}
		write(t, c, b)
		sent = append(sent, b...)
		time.Sleep(time.Millisecond)
	}
	if got := readFull(t, c, len(sent)); !bytes.Equal(got, sent) {
		t.Fatalf("reordered while the delay changed:\n got %v\nwant %v", got, sent)
	}
}

// Rate 1: every buffer is written twice, both ways.
func TestDuplicate(t *testing.T) {
	s := newServer(t, false)
	p := newProxy(t, s.ln.Addr().String())
	p.SetDuplicateRate(1)
	c := dial(t, p)
	want := []byte{}
	for _, b := range []byte("abc") {
		write(t, c, []byte{b})
		want = append(want, b, b)
		if got := s.waitReceived(t, len(want)); !bytes.Equal(got, want) {
			t.Fatalf("server got %q, want %q", got, want)
		}
	}
	write(t, s.conn(t, 0), []byte("z"))
	if got := readFull(t, c, 2); string(got) != "zz" {
		t.Fatalf("client got %q, want \"zz\"", got)
	}
	waitStats(t, p, func(st Stats) bool {
		return st.Duplicated == 4 && st.BytesToServer == 6 && st.BytesToClient == 2 && st.Corrupted == 0 && st.Dropped == 0
	})
	// Off again: a clean forward.
	p.SetDuplicateRate(0)
	write(t, c, []byte("d"))
	if got := s.waitReceived(t, 7); string(got) != "aabbccd" {
		t.Fatalf("after rate 0: server got %q", got)
	}
}

// Rate 1: every buffer has exactly one byte XORed with 0xff, both ways.
func TestCorrupt(t *testing.T) {
	s := newServer(t, false)
	p := newProxy(t, s.ln.Addr().String())
	p.SetCorruptRate(1)
	c := dial(t, p)
	write(t, c, []byte{0x41})
	if got := s.waitReceived(t, 1); !bytes.Equal(got, []byte{0xbe}) {
		t.Fatalf("server got %x, want be", got)
	}
	// A larger write: same length, and as many flipped bytes as buffers
	// corrupted (each at most once, since a zero becomes 0xff).
	before := p.Stats().Corrupted
	write(t, c, make([]byte, 1000))
	got := s.waitReceived(t, 1001)[1:]
	if len(got) != 1000 {
		t.Fatalf("server got %d bytes, want 1000", len(got))
	}
	flipped := int64(bytes.Count(got, []byte{0xff}))
	if n := p.Stats().Corrupted - before; flipped != n || n < 1 || flipped+int64(bytes.Count(got, []byte{0})) != 1000 {
		t.Fatalf("%d bytes flipped, %d buffers corrupted: %x", flipped, n, got)
	}
	write(t, s.conn(t, 0), []byte{0x00})
	if got := readFull(t, c, 1); got[0] != 0xff {
		t.Fatalf("client got %x, want ff", got)
	}
	p.SetCorruptRate(0)
	write(t, c, []byte{0x41})
	if got := s.waitReceived(t, 1002); got[1001] != 0x41 {
		t.Fatalf("after rate 0: %x", got[1001])
	}
	waitStats(t, p, func(st Stats) bool { return st.Duplicated == 0 && st.BytesToServer == 1002 && st.BytesToClient == 1 })
}

func TestModesAndStats(t *testing.T) {
	s := newServer(t, false)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p)
	write(t, c, []byte("a"))
	s.waitReceived(t, 1)
	sc := s.conn(t, 0)

	p.SetMode(Blackhole)
	write(t, c, []byte("b"))
	write(t, sc, []byte("B"))
	waitUntil(t, "blackhole drops", func() bool { return p.Stats().Dropped == 2 })

	p.SetMode(DropReplies)
	write(t, sc, []byte("C"))
	waitUntil(t, "reply dropped", func() bool { return p.Stats().Dropped == 3 })
	write(t, c, []byte("c"))
	if got := s.waitReceived(t, 2); string(got) != "ac" {
		t.Fatalf("server got %q, want \"ac\" (b blackholed)", got)
	}

	p.SetMode(Forward)
	write(t, sc, []byte("D"))
	if got := readFull(t, c, 1); string(got) != "D" {
		t.Fatalf("client got %q, want \"D\" (B and C dropped)", got)
	}

	// Two more connections; ResetConns closes them all.
	c2, c3 := dial(t, p), dial(t, p)
	s.conn(t, 2)
	p.ResetConns()
	for _, cc := range []net.Conn{c, c2, c3} {
		cc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := cc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("after ResetConns: read %v, want EOF", err)
		}
	}
	waitStats(t, p, func(st Stats) bool { return st == Stats{Accepted: 3, BytesToServer: 2, BytesToClient: 1, Dropped: 3} })
}

// A connection whose target refuses is closed at once, and counted.
func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newProxy(t, addr)
	c := dial(t, p)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read succeeded on a connection whose target refused")
	}
	if st := p.Stats(); st.Accepted != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

// Close returns at once even with buffers waiting out a long delay, and
// leaves no goroutine behind.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	s := newServer(t, true)
	p, err := New("127.0.0.1:0", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(time.Hour)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	write(t, c, []byte("stuck"))
	waitUntil(t, "buffer queued", func() bool { return p.Stats().Accepted == 1 })
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %s", el)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after Close: read %v, want EOF", err)
	}
	if b, _ := s.received(); len(b) != 0 {
		t.Fatalf("server got %q before its delay", b)
	}
	s.close()
	goleak.VerifyNone(t)
}
