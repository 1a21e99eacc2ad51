package secpolicy_test

import (
	"context"
	"errors"
	"testing"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/secpolicy"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// No policy: a plaintext cluster, every process may join. Secured: a
// plaintext process is refused, a TLS one joins; securing twice changes
// nothing; a policy that does not decode is an error, and Secure repairs it.
func TestPolicy(t *testing.T) {
	c := etcdtest.Client(t, etcdtest.Single(t).Endpoint())
	ctx := context.Background()
	keys := keyspace.Default()
	if _, found, err := secpolicy.Read(ctx, c, keys); found || err != nil {
		t.Fatalf("fresh cluster: found %v, %v", found, err)
	}
	for _, tls := range []bool{false, true} {
		if err := secpolicy.Enforce(ctx, c, keys, tls, "node n1"); err != nil {
			t.Fatalf("plaintext cluster, TLS %v: %v", tls, err)
		}
	}
	if err := secpolicy.Secure(ctx, c, keys); err != nil {
		t.Fatal(err)
	}
	rev := func() int64 {
		r, err := c.Get(ctx, keys.Security())
		if err != nil || len(r.Kvs) != 1 {
			t.Fatal(r, err)
		}
		return r.Kvs[0].ModRevision
	}
	r0 := rev()
	if err := secpolicy.Secure(ctx, c, keys); err != nil || rev() != r0 {
		t.Fatalf("second Secure: %v, revision %d → %d", err, r0, rev())
	}
	if err := secpolicy.Enforce(ctx, c, keys, false, "node n1"); !errors.Is(err, secpolicy.ErrMismatch) {
		t.Fatalf("plaintext node in a secured cluster: %v, want ErrMismatch", err)
	}
	if err := secpolicy.Enforce(ctx, c, keys, true, "node n1"); err != nil {
		t.Fatalf("TLS node in a secured cluster: %v", err)
	}
	if _, err := c.Put(ctx, keys.Security(), "{"); err != nil {
		t.Fatal(err)
	}
	if err := secpolicy.Enforce(ctx, c, keys, true, "node n1"); !errors.Is(err, secpolicy.ErrInvalid) {
		t.Fatalf("a corrupt policy: %v, want ErrInvalid", err)
	}
	if err := secpolicy.Secure(ctx, c, keys); err != nil {
		t.Fatal(err)
	}
	if p, _, err := secpolicy.Read(ctx, c, keys); err != nil || !p.MutualTLS {
		t.Fatalf("repaired: %+v %v", p, err)
	}
}
