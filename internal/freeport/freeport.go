// Package freeport picks free loopback TCP ports for servers that bind them
// later (tests, and the process clusters of `meshctl verify`).
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
)

// ErrNone: no free port was found.
var ErrNone = errors.New("freeport: no free port in 20000-31999")

// Get returns a free loopback TCP port. It is picked at random below Linux's
// ephemeral range (32768–60999), so the kernel does not hand it to some other
// process's connection or ":0" listener between this check and the bind;
// only another caller of Get could pick it too, which is unlikely among
// 12,000 ports.
func Get() (int, error) {
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
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
