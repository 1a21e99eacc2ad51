package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Calls that never left: a connection refused, or a connection whose two
// ends disagree on TLS. Nothing was sent, so the outcome is known (nothing
// ran), and waiting for the call's deadline would only hide the cause.

// ErrNoNode: no node listens at the address called (the connection was
// refused): nothing was sent.
var ErrNoNode = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "client: no node")

// ErrTLSMismatch: the node at the address called speaks TLS and the client
// does not, or the other way round: nothing was sent.
var ErrTLSMismatch = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "client: TLS on one end only")

// dialProblem names why a call's connection could not carry it (nil: the
// error says nothing of the kind, the call may have been sent).
//
// A connection closed before the node answered is what a node of the
// other TLS mind does, but also what a proxy or load balancer does whose
// node is gone: the two are told apart by asking the address once more,
// with a TLS hello (probeTLS). Only a node that answers in TLS (or, to a
// secured client, in anything else) is a mismatch; one that closes again
// is not, and the call is retried as after any unavailable node.
func dialProblem(addr string, err error, secured bool) error {
	return dialProblemProbed(addr, err, secured, probeTLS)
}

func dialProblemProbed(addr string, err error, secured bool, probe func(addr string) tlsAnswer) error {
	s, ok := grpcstatus.FromError(err)
	if !ok || s.Code() != codes.Unavailable {
		return nil
	}
	m := s.Message()
	switch {
	case strings.Contains(m, "connection refused"):
		return fmt.Errorf("%w at %s: the connection was refused, nothing was sent", ErrNoNode, addr)
	case secured && (strings.Contains(m, "first record does not look like a TLS handshake") ||
		strings.Contains(m, "tls: ") && strings.Contains(m, "EOF") && probe(addr) == answersPlain):
		return fmt.Errorf("%w: the node at %s does not speak TLS (the client does): nothing was sent", ErrTLSMismatch, addr)
	case !secured && (strings.Contains(m, "server preface") || strings.Contains(m, "connection closed before")) && probe(addr) == answersTLS:
		return fmt.Errorf("%w: the node at %s speaks TLS (the client does not: give it the cluster's CA and a certificate): nothing was sent", ErrTLSMismatch, addr)
	}
	return nil
}

// tlsAnswer is what an address answered a TLS hello with.
type tlsAnswer int

const (
	answersNothing tlsAnswer = iota // no connection, or closed without a word
	answersTLS                      // a TLS server (whatever it thought of the hello)
	answersPlain                    // bytes that are not TLS: a plaintext server
)

// probeTimeout bounds a probe: it runs only after a connection failed.
const probeTimeout = time.Second

// probeTLS sends addr a TLS hello and says what came back. The
// certificate is not checked: the probe only asks which protocol the
// other end speaks, and sends nothing after the handshake.
func probeTLS(addr string) tlsAnswer {
	d := &net.Dialer{Timeout: probeTimeout}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // a protocol probe, nothing is sent over it
	var rec tls.RecordHeaderError
	var alert tls.AlertError
	switch {
	case err == nil:
		conn.Close()
		return answersTLS
	case errors.As(err, &rec):
		return answersPlain
	case errors.As(err, &alert):
		return answersTLS // a TLS server that refused the hello (e.g. it wants a client certificate)
	}
	return answersNothing
}

// refusedAll reports whether every gateway the client calls through
// refused (a call routed from etcd retries: an owner restarting refuses
// for a moment, and its objects are served elsewhere soon).
func (c *Client) refusedAll(refused map[string]error) bool {
	if c.cache != nil || len(c.cfg.Nodes) == 0 {
		return false
	}
	for _, a := range c.cfg.Nodes {
		if refused[a] == nil {
			return false
		}
	}
	return true
}

// joinRefused is one error for every gateway that refused.
func (c *Client) joinRefused(refused map[string]error) error {
	errs := make([]error, 0, len(c.cfg.Nodes))
	for _, a := range c.cfg.Nodes {
		errs = append(errs, refused[a])
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
