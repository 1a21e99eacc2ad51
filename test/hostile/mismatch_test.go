package hostile_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/pkg/client"
)

// A client and a node that disagree on TLS never carry a call: the client
// says so at once (ErrTLSMismatch, nothing sent) instead of waiting for the
// call's deadline and calling its outcome unknown. Both ways: a plaintext
// client at a secured node, a client with certificates at a plaintext
// gRPC server.
func TestClientTLSMismatchSaidAtOnce(t *testing.T) {
	c := cluster(t, 1, chaos.Config{TLS: true})
	secured := c.Node("n1").Address
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := grpc.NewServer()
	go func() { _ = plain.Serve(l) }()
	defer plain.Stop()
	for name, cfg := range map[string]client.Config{
		"plaintext client, secured node": {Nodes: []string{secured}},
		"secured client, plaintext node": {Nodes: []string{l.Addr().String()}, TLS: c.Files("admin")},
	} {
		cfg.Timeout = time.Hour // the answer comes long before it
		cl, err := client.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = cl.Call(ctx, "actor/counter/x", "get")
		cancel()
		cl.Close()
		if !errors.Is(err, client.ErrTLSMismatch) {
			t.Errorf("%s: %v, want ErrTLSMismatch", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// A proxy (or load balancer) whose node is gone accepts a connection and
// closes it before anything is said, as a node of the other TLS mind
// does. That is no mismatch: the client keeps retrying, for a plaintext
// and a secured client alike, and its call ends at its deadline as
// unavailable, never as ErrTLSMismatch.
func TestClientBehindAClosingProxyIsNoTLSMismatch(t *testing.T) {
	c := cluster(t, 1, chaos.Config{TLS: true})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	for name, cfg := range map[string]client.Config{
		"plaintext client": {Nodes: []string{l.Addr().String()}},
		"secured client":   {Nodes: []string{l.Addr().String()}, TLS: c.Files("admin")},
	} {
		cfg.Timeout = 2 * time.Second
		cl, err := client.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Call(context.Background(), "actor/counter/x", "get")
		cl.Close()
		if err == nil || errors.Is(err, client.ErrTLSMismatch) {
			t.Errorf("%s: %v, want the deadline, not a TLS mismatch", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
