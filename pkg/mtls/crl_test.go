package mtls_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshloc/meshloc/pkg/mtls"
)

// A revoked certificate is refused in the handshake both ways: a server
// with the list refuses a revoked client, a client with the list refuses
// a revoked server. The list is read again on Reload; a list signed by
// another CA, or unreadable, is refused and the one in use stays.
func TestRevocation(t *testing.T) {
	dir := t.TempDir()
	if _, err := mtls.Init(dir, mtls.InitOptions{Nodes: []string{"n1", "n2"}}); err != nil {
		t.Fatal(err)
	}
	f := func(n string) string { return filepath.Join(dir, n) }
	crl := f(mtls.CRLFile)
	if _, err := mtls.Revoke(dir, nil, 0); err != nil { // an empty list to start with
		t.Fatal(err)
	}
	loadWith := func(name string) *mtls.Reloader {
		r, err := mtls.Load(mtls.Files{CA: f("ca.crt"), Cert: f(name + ".crt"), Key: f(name + ".key"), CRL: crl})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	n1, n2, op := loadWith("n1"), loadWith("n2"), loadWith("operator")
	if _, serr, cerr := handshake(t, n1.ServerConfig(), op.ClientConfig(nil)); serr != nil || cerr != nil {
		t.Fatalf("before revocation: %v %v", serr, cerr)
	}
	if sns, err := mtls.Revoke(dir, []string{"operator", "n2"}, 0); err != nil || len(sns) != 2 {
		t.Fatalf("revoke: %v %v", sns, err)
	}
	if _, err := mtls.Revoke(dir, []string{"nobody"}, 0); err == nil {
		t.Fatal("revoking a name with no certificate succeeded")
	}
	// Not reloaded yet: the old list holds.
	if _, serr, _ := handshake(t, n1.ServerConfig(), op.ClientConfig(nil)); serr != nil {
		t.Fatalf("before reload: %v", serr)
	}
	if err := n1.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, serr, _ := handshake(t, n1.ServerConfig(), op.ClientConfig(nil)); !errors.Is(serr, mtls.ErrRevoked) {
		t.Fatalf("a revoked client: server error %v, want ErrRevoked", serr)
	}
	if _, _, cerr := handshake(t, n2.ServerConfig(), n1.ClientConfig(nil)); !errors.Is(cerr, mtls.ErrRevoked) {
		t.Fatalf("a revoked server: client error %v, want ErrRevoked", cerr)
	}
	if _, serr, cerr := handshake(t, n1.ServerConfig(), n1.ClientConfig(nil)); serr != nil || cerr != nil {
		t.Fatalf("an unrevoked peer: %v %v", serr, cerr)
	}

	// Another CA's list: refused at load and at reload (the list in use stays).
	other := t.TempDir()
	if _, err := mtls.Init(other, mtls.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mtls.Revoke(other, nil, 0); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(other, mtls.CRLFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crl, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := mtls.Load(mtls.Files{CA: f("ca.crt"), Cert: f("n1.crt"), Key: f("n1.key"), CRL: crl}); err == nil {
		t.Fatal("a list signed by another CA was loaded")
	}
	if err := n1.Reload(); err == nil {
		t.Fatal("a list signed by another CA was reloaded")
	}
	if _, serr, _ := handshake(t, n1.ServerConfig(), op.ClientConfig(nil)); !errors.Is(serr, mtls.ErrRevoked) {
		t.Fatalf("after a refused reload: %v, want the list in use to hold", serr)
	}
	if err := (mtls.Files{CRL: crl}).Validate(); err == nil {
		t.Fatal("a CRL without certificates validated")
	}
}
