// Package tcpproxy is a userspace TCP proxy for fault injection on links we own
// (node↔etcd, node↔node). It sits between a client (whoever dials Addr) and a
// server (Target); every accepted connection gets its own connection to the
// target, and bytes are pumped both ways in buffers of up to 64 KiB: one
// buffer is whatever one Read returned.
//
// It is a test tool, built into the product only so that `meshctl verify` can
// use it; it never listens on anything but the address it is given.
//
// # Faults, and what the receiver sees
//
// Every decision (drop, corrupt, duplicate, and the delay) is taken when a
// buffer is read from its sender, so a change applies to bytes read from then
// on; bytes already read and waiting out their delay are delivered as decided.
//
//   - Forward (the default mode): the receiver sees the sender's bytes, in
//     order, unchanged.
//   - Blackhole (a partition): both directions are discarded and the
//     connections stay open. Senders see their writes succeed; receivers see
//     nothing at all — no data, no FIN, no RST — until their own timeouts or
//     keep-alives give up. After a heal the stream has a hole in the middle, so
//     call ResetConns: both sides then see the connection closed and must
//     reconnect.
//   - DropReplies: client→server bytes are forwarded, server→client bytes are
//     discarded. The server sees every request and answers; the client never
//     sees an answer (an "outcome unknown" for every write it sent).
//   - Delay (SetDelay, SetDelays, per direction): each buffer is delivered
//     its delay after it was read. Bytes are never reordered within a
//     connection, and the delay is a latency, not a throughput limit: buffers
//     read meanwhile are queued (up to queueLen buffers per direction, then
//     the proxy stops reading and TCP flow control pushes back on the
//     sender). Lowering the delay never lets a buffer overtake an earlier one:
//     it waits for its predecessor.
//   - Duplication (SetDuplicateRate): with probability p a buffer is written
//     twice in a row. TCP is a byte stream, so the receiver sees a stretch of
//     bytes repeated: for a framed protocol (HTTP/2 and gRPC, raft's peer
//     streams) the framing is desynchronised — a length prefix or frame header
//     now points into the repeated bytes — and the receiver sees garbage and
//     must close the connection cleanly. When the buffer held exactly whole
//     frames, the receiver instead sees the same frames twice (a duplicated
//     message), which its protocol must reject or tolerate.
//   - Corruption (SetCorruptRate): with probability p one byte of a buffer,
//     at a random offset, is XORed with 0xff. The proxy works above TCP, so
//     TCP's checksum does not catch it: the receiver gets a wrong byte. In a
//     frame header that is garbage (the connection should be closed); in a
//     payload it is caught only by a checksum of the protocol itself (TLS
//     closes the connection; plain HTTP/2, gRPC and protobuf have none and may
//     decode a silently changed value).
//
// Corruption is applied before duplication: a corrupted buffer that is also
// duplicated is written twice with the same corrupted byte. Dropped buffers
// are neither corrupted nor duplicated. Either side closing (or ResetConns,
// or Close) closes both connections of the pair; buffers still waiting out
// their delay are then discarded.
//
// Stats counts connections, bytes and faults since New.
package tcpproxy

import (
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode says what the proxy does with the bytes of every connection.
type Mode int32

const (
	// Forward copies bytes both ways.
	Forward Mode = 1 + iota
	// Blackhole discards bytes both ways; connections stay open (a partition).
	Blackhole
	// DropReplies forwards client→server and discards server→client.
	DropReplies
)

func (m Mode) String() string {
	switch m {
	case Forward:
		return "forward"
	case Blackhole:
		return "blackhole"
	case DropReplies:
		return "drop-replies"
	}
	return "invalid"
}

// bufSize is the largest buffer one Read fills, so the largest unit that is
// delayed, dropped, duplicated or corrupted as a whole.
const bufSize = 64 << 10

// queueLen bounds the buffers read but not yet written, per direction of a
// connection (so at most queueLen × 64 KiB held while a delay runs).
const queueLen = 64

// Stats are counters since New. Bytes are counted as written to their
// receiver: a duplicated buffer counts twice, a dropped one not at all.
type Stats struct {
	// Accepted is the number of connections accepted on Addr (including those
	// whose dial to the target failed: they are closed at once).
	Accepted int64
	// BytesToServer and BytesToClient are the bytes written to the target
	// (client→server) and to the accepted connections (server→client).
	BytesToServer int64
	BytesToClient int64
	// Dropped is the number of buffers discarded by Blackhole or DropReplies.
	Dropped int64
	// Duplicated and Corrupted are the buffers written twice, and those with
	// a flipped byte.
	Duplicated int64
	Corrupted  int64
}

// Proxy forwards connections accepted on its listener to Target.
type Proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32
	// Nanoseconds each buffer waits, by direction, before it is written.
	delayToServer atomic.Int64
	delayToClient atomic.Int64
	// Probabilities, as math.Float64bits.
	dupRate     atomic.Uint64
	corruptRate atomic.Uint64

	accepted, bytesToServer, bytesToClient atomic.Int64
	dropped, duplicated, corrupted         atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New listens on listenAddr (e.g. "127.0.0.1:0") and forwards to target.
func New(listenAddr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.mode.Store(int32(Forward))
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetMode changes what happens to bytes from now on.
func (p *Proxy) SetMode(m Mode) { p.mode.Store(int32(m)) }

// SetDelay delays every forwarded buffer, both ways, by d.
func (p *Proxy) SetDelay(d time.Duration) { p.SetDelays(d, d) }

// SetDelays delays the buffers going client→server by toServer and those
// going server→client by toClient (≤ 0: no delay).
func (p *Proxy) SetDelays(toServer, toClient time.Duration) {
	p.delayToServer.Store(int64(max(toServer, 0)))
	p.delayToClient.Store(int64(max(toClient, 0)))
}

// SetDuplicateRate makes each forwarded buffer, both ways, be written twice
// with probability rate (clamped to [0, 1]; 0 turns it off).
func (p *Proxy) SetDuplicateRate(rate float64) { p.dupRate.Store(math.Float64bits(clampRate(rate))) }

// SetCorruptRate makes each forwarded buffer, both ways, get one byte XORed
// with 0xff, at a random offset, with probability rate (clamped to [0, 1]; 0
// turns it off).
func (p *Proxy) SetCorruptRate(rate float64) {
	p.corruptRate.Store(math.Float64bits(clampRate(rate)))
}

func clampRate(r float64) float64 {
	switch {
	case math.IsNaN(r) || r <= 0:
		return 0
	case r >= 1:
		return 1
	}
	return r
}

// chance reports true with probability rate (never for 0, always for 1).
func chance(rate *atomic.Uint64) bool {
	r := math.Float64frombits(rate.Load())
	return r > 0 && rand.Float64() < r
}

// Stats returns the counters since New.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted:      p.accepted.Load(),
		BytesToServer: p.bytesToServer.Load(),
		BytesToClient: p.bytesToClient.Load(),
		Dropped:       p.dropped.Load(),
		Duplicated:    p.duplicated.Load(),
		Corrupted:     p.corrupted.Load(),
	}
}

// ResetConns closes every open connection (a heal after a partition: streams
// whose bytes were discarded are broken and must reconnect).
func (p *Proxy) ResetConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops accepting, closes every connection and waits for the pumps.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetConns()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		if !p.track(in) {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.untrack(in)
			continue
		}
		if !p.track(out) {
			p.untrack(in)
			return
		}
		pr := &pair{p: p, client: in, server: out, done: make(chan struct{})}
		toServer := make(chan chunk, queueLen)
		toClient := make(chan chunk, queueLen)
		p.wg.Add(4)
		go pr.read(in, toServer, false)
		go pr.write(out, toServer, &p.bytesToServer)
		go pr.read(out, toClient, true)
		go pr.write(in, toClient, &p.bytesToClient)
	}
}

// pair is one proxied connection: the accepted one (client) and the one to
// the target (server), each direction a reader and a writer goroutine joined
// by a bounded FIFO queue, so a delay never reorders bytes.
type pair struct {
	p              *Proxy
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed by kill
}

// kill closes both connections (once); writers stop waiting and discard.
func (pr *pair) kill() {
	pr.once.Do(func() {
		close(pr.done)
		pr.p.untrack(pr.client)
		pr.p.untrack(pr.server)
	})
}

func (pr *pair) dead() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

// chunk is one buffer read, with what to do to it.
type chunk struct {
	b   []byte
	due time.Time // write it at this time, not before
	dup bool
}

// read reads src until it fails, deciding each buffer's fate, and queues the
// forwarded ones. It closes q when it ends; on an error other than the
// sender's clean close it kills the pair at once.
func (pr *pair) read(src net.Conn, q chan<- chunk, reply bool) {
	p := pr.p
	defer p.wg.Done()
	defer close(q)
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m := Mode(p.mode.Load())
			if m == Blackhole || (m == DropReplies && reply) {
				p.dropped.Add(1)
			} else {
				c := chunk{b: append([]byte(nil), buf[:n]...)}
				d := p.delayToServer.Load()
				if reply {
					d = p.delayToClient.Load()
				}
				if d > 0 {
					c.due = time.Now().Add(time.Duration(d))
				}
				if chance(&p.corruptRate) {
					c.b[rand.IntN(n)] ^= 0xff
					p.corrupted.Add(1)
				}
				if chance(&p.dupRate) {
					c.dup = true
					p.duplicated.Add(1)
				}
				select {
				case q <- c:
				case <-pr.done:
				}
			}
		}
		if err != nil {
			// EOF: the writer flushes what is queued, then kills the pair.
			// Anything else (a reset, a closed conn): kill now.
			if !errors.Is(err, io.EOF) {
				pr.kill()
			}
			return
		}
	}
}

// write writes the queued buffers to dst, each at its due time, until the
// queue is closed; then it kills the pair (either side closing closes both).
// After a failure it discards the rest.
func (pr *pair) write(dst net.Conn, q <-chan chunk, bytes *atomic.Int64) {
	defer pr.p.wg.Done()
	defer pr.kill()
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for c := range q {
		if pr.dead() {
			continue // drain, so the reader never blocks
		}
		if wait := time.Until(c.due); !c.due.IsZero() && wait > 0 {
			if t == nil {
				t = time.NewTimer(wait)
			} else {
				t.Reset(wait)
			}
			select {
			case <-t.C:
			case <-pr.done:
				continue
			}
		}
		times := 1
		if c.dup {
			times = 2
		}
		for range times {
			n, err := dst.Write(c.b)
			bytes.Add(int64(n))
			if err != nil {
				pr.kill()
				break
			}
		}
	}
}
