// Package tcpproxy is a userspace TCP proxy for fault injection on links we own
// (node↔etcd, node↔node): forward, blackhole (a partition: bytes vanish, the
// connection stays open), drop only the replies (server→client), or delay.
//
// It is a test tool, built into the product only so that `meshctl verify` can
// use it; it never listens on anything but the address it is given.
package tcpproxy

import (
	"errors"
	"io"
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

// Proxy forwards connections accepted on its listener to Target.
type Proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32
	delay  atomic.Int64 // nanoseconds added before each forwarded write

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

// SetDelay delays every forwarded chunk by d.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

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
		p.wg.Add(2)
		go p.pump(in, out, false)
		go p.pump(out, in, true)
	}
}

func (p *Proxy) pump(src, dst net.Conn, reply bool) {
	defer p.wg.Done()
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m := Mode(p.mode.Load())
			drop := m == Blackhole || (m == DropReplies && reply)
			if !drop {
				if d := time.Duration(p.delay.Load()); d > 0 {
					time.Sleep(d)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}
