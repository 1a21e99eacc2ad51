package locationd

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/secpolicy"
)

// policyRetry is how long enforcePolicy waits between attempts while etcd
// does not answer.
const policyRetry = time.Second

// enforcePolicy applies the cluster's security policy (internal/secpolicy)
// once etcd answers: a locationd that serves TLS records that the cluster
// is secured (nodes without TLS then refuse to start); one that serves
// plaintext must not serve a secured cluster, and a mismatch comes on the
// returned channel (Run stops with it). It runs beside the API because
// locationd serves — unavailable, 503 — while etcd does not answer. stop
// ends it and waits for it.
func (s *Server) enforcePolicy(ctx context.Context, cli *clientv3.Client, what string) (mismatch <-chan error, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			actx, acancel := context.WithTimeout(ctx, policyRetry)
			var err error
			if s.tls != nil {
				err = secpolicy.Secure(actx, cli, s.keys)
			} else {
				err = secpolicy.Enforce(actx, cli, s.keys, false, what)
			}
			acancel()
			if err == nil {
				return
			}
			if errors.Is(err, secpolicy.ErrMismatch) {
				out <- err
				return
			}
			s.log.Debug().Err(err).Msg("security policy not read yet")
			t := time.NewTimer(policyRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return out, func() { cancel(); <-done }
}
