// Package secpolicy owns the cluster's security policy: one etcd key,
// <prefix>/<cluster>/security, that says whether the cluster is secured
// (mutual TLS on every port). locationd writes it when it serves TLS; a
// process whose own listener does not match it refuses to start (Check),
// so a node started without its TLS flags cannot join a secured cluster
// and serve callers who present no certificate. Only locationd's and
// root's etcd users may write the key (internal/etcdauth); nodes read it.
package secpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Policy is the cluster's security policy as stored (JSON).
type Policy struct {
	// MutualTLS: every process serves mutual TLS and presents its
	// certificate; a plaintext process is refused.
	MutualTLS bool `json:"mutualTLS"`
}

// ErrMismatch: a process's listener does not match the cluster's policy;
// it must not start.
var ErrMismatch = wire.Sentinel(pb.Code_CODE_PERMISSION_DENIED, "secpolicy: this process does not match the cluster's security policy")

// ErrInvalid: the stored policy does not decode.
var ErrInvalid = wire.Sentinel(pb.Code_CODE_CORRUPT_RECORD, "secpolicy: invalid security policy")

// Read returns the stored policy (found false: none was written, a
// plaintext cluster).
func Read(ctx context.Context, c *clientv3.Client, keys keyspace.Keys) (p Policy, found bool, err error) {
	resp, err := c.Get(ctx, keys.Security())
	if err != nil {
		return Policy{}, false, fmt.Errorf("secpolicy: read %s: %w", keys.Security(), err)
	}
	if len(resp.Kvs) == 0 {
		return Policy{}, false, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return Policy{}, true, fmt.Errorf("%w: %s: %w", ErrInvalid, keys.Security(), err)
	}
	return p, true, nil
}

// Secure records that the cluster is secured (idempotent). It never
// writes a plaintext policy: securing is one way, undone only by an
// operator deleting the key with root's credentials.
func Secure(ctx context.Context, c *clientv3.Client, keys keyspace.Keys) error {
	p, found, err := Read(ctx, c, keys)
	if err != nil && !errors.Is(err, ErrInvalid) {
		return err
	}
	if found && err == nil && p.MutualTLS {
		return nil
	}
	b, _ := json.Marshal(Policy{MutualTLS: true})
	if _, err := c.Put(ctx, keys.Security(), string(b)); err != nil {
		return fmt.Errorf("secpolicy: write %s: %w", keys.Security(), err)
	}
	return nil
}

// Check is the one rule: a process that serves mutual TLS may join any
// cluster; one that serves plaintext may not join a secured one. what
// names the process for the error ("node n1").
func Check(p Policy, servesTLS bool, what string) error {
	if p.MutualTLS && !servesTLS {
		return fmt.Errorf("%w: the cluster is secured (mutual TLS, etcd key security) but %s was started without TLS: "+
			"give its certificate (--cert-file, --key-file, --trusted-ca-file)", ErrMismatch, what)
	}
	return nil
}

// Enforce reads the policy and checks this process against it.
func Enforce(ctx context.Context, c *clientv3.Client, keys keyspace.Keys, servesTLS bool, what string) error {
	p, _, err := Read(ctx, c, keys)
	if err != nil {
		return err
	}
	return Check(p, servesTLS, what)
}
