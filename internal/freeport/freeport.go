// Package freeport picks free loopback TCP ports for servers that bind them
// later (tests, and the process clusters of `meshctl verify`).
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

// ErrNone: no free port was found.
var ErrNone = errors.New("freeport: no free port in 20000-31999")

// The range sits below Linux's ephemeral range (32768–60999), so the kernel
// does not hand a picked port to some other process's connection or ":0"
// listener between the pick and the bind. It is split into blocks; a
// process draws from the block its pid selects, so that the test binaries
// of different packages, running at the same time, rarely pick the same
// port; within a process a port is never handed out twice.
const (
	low    = 20000
	blocks = 12
	size   = 1000
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Get returns a free loopback TCP port, one this process has not handed out
// before.
func Get() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	block := os.Getpid() % blocks
	for attempt := range 3000 {
		b := block
		if attempt >= 1000 { // the block is crowded: any block
			b = rand.IntN(blocks)
		}
		p := low + b*size + rand.IntN(size)
		if handed[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			handed[p] = true
			return p, nil
		}
	}
	return 0, ErrNone
}

// Addr is Get as "127.0.0.1:<port>".
func Addr() (string, error) {
	p, err := Get()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}
