package client

import (
	"errors"
	"fmt"
	"strings"

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
func dialProblem(addr string, err error, secured bool) error {
	s, ok := grpcstatus.FromError(err)
	if !ok || s.Code() != codes.Unavailable {
		return nil
	}
	m := s.Message()
	switch {
	case strings.Contains(m, "connection refused"):
		return fmt.Errorf("%w at %s: the connection was refused, nothing was sent", ErrNoNode, addr)
	case secured && (strings.Contains(m, "first record does not look like a TLS handshake") || strings.Contains(m, "tls: ") && strings.Contains(m, "EOF")):
		return fmt.Errorf("%w: the node at %s does not speak TLS (the client does): nothing was sent", ErrTLSMismatch, addr)
	case !secured && (strings.Contains(m, "server preface") || strings.Contains(m, "connection closed before")):
		return fmt.Errorf("%w: the node at %s speaks TLS (the client does not: give it the cluster's CA and a certificate): nothing was sent", ErrTLSMismatch, addr)
	}
	return nil
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
