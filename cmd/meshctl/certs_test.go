package main

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pkcs12 "software.sslmate.com/src/go-pkcs12"

	"github.com/meshloc/meshloc/pkg/mtls"
)

// certs init writes outside the working tree by default, every key 0600,
// and reminds to keep ca.key offline; certs add issues with that CA (a
// new node and its etcd user, an operator with a PKCS#12 file), refusing
// to overwrite; certs revoke lists the serials in ca.crl.
func TestCertsInitAddRevoke(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", home)
	t.Setenv("HOME", home)
	dir := filepath.Join(home, "meshloc", "certs")
	r := meshctl(nil, "certs", "init", "--nodes", "n1")
	if r.code != 0 || !strings.Contains(r.stdout, "keep it offline") {
		t.Fatalf("init: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, n := range []string{"ca.key", "n1.key", "etcd-node-n1.key", "admin.key"} {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", n, st, err)
		}
	}
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = meshctl(nil, "certs", "add", "--nodes", "n4", "--operator", "alice", "--p12-password-file", pw)
	if r.code != 0 {
		t.Fatalf("add: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, n := range []string{"n4", "alice", "etcd-node-n4"} {
		if _, err := mtls.Load(mtls.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, n+".crt"), Key: filepath.Join(dir, n+".key")}); err != nil && n != "etcd-node-n4" {
			t.Fatalf("%s: %v", n, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "alice.p12"))
	if err != nil {
		t.Fatal(err)
	}
	_, cert, cas, err := pkcs12.DecodeChain(b, "s3cret")
	if err != nil || cert.Subject.CommonName != "alice" || len(cas) != 1 {
		t.Fatalf("alice.p12: %v %v %d", err, cert, len(cas))
	}
	if id, err := mtls.Of(cert); err != nil || id.Role != mtls.RoleOperator {
		t.Fatalf("alice.p12 names %v %v, want an operator", id, err)
	}
	if r := meshctl(nil, "certs", "add", "--nodes", "n4"); r.code != 2 || !strings.Contains(r.stderr, "nothing written") {
		t.Fatalf("add over existing files: exit %d %q", r.code, r.stderr)
	}
	if r := meshctl(nil, "certs", "add"); r.code != 2 {
		t.Fatalf("add with nothing named: exit %d %q", r.code, r.stderr)
	}
	if r := meshctl(nil, "certs", "revoke", "nobody"); r.code != 2 {
		t.Fatalf("revoke a name without a certificate: exit %d %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, mtls.CRLFile)); !os.IsNotExist(err) {
		t.Fatalf("a refused revoke wrote the list: %v", err)
	}
	if r := meshctl(nil, "certs", "revoke", "n4", "alice"); r.code != 0 || strings.Count(r.stdout, "revoked serial") != 2 {
		t.Fatalf("revoke: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	crlb, err := os.ReadFile(filepath.Join(dir, mtls.CRLFile))
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.ParseRevocationList(crlb) // DER, as etcd reads it
	if err != nil || len(crl.RevokedCertificateEntries) != 2 {
		t.Fatalf("ca.crl: %v %v", crl, err)
	}
}
