package mtls_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/mtls"
)

// issue writes a CA and, for each identity, <name>.crt/.key into a new
// directory, and returns the directory.
func issue(t *testing.T, ca *mtls.CA, ids ...mtls.Identity) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{"ca.crt": ca.CertPEM}
	for _, id := range ids {
		l, err := ca.Issue(id, []string{"127.0.0.1", "localhost"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		files[id.Name+".crt"], files[id.Name+".key"] = l.CertPEM, l.KeyPEM
	}
	if err := mtls.WriteNew(dir, files); err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T, dir, name string) *mtls.Reloader {
	t.Helper()
	r, err := mtls.Load(mtls.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// handshake runs a TLS handshake between a server and a client config over
// a pipe and returns the server's view of the client's identity and the two
// handshake errors.
func handshake(t *testing.T, srv, cli *tls.Config) (mtls.Identity, error, error) {
	t.Helper()
	// A loopback TCP pair: unlike net.Pipe, writes are buffered, so an
	// alert written by a side that gave up does not block it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_ = a.SetDeadline(time.Now().Add(10 * time.Second))
	_ = b.SetDeadline(time.Now().Add(10 * time.Second))
	s, c := tls.Server(a, srv), tls.Client(b, cli)
	errc := make(chan error, 1)
	go func() {
		err := c.Handshake()
		if err != nil {
			b.Close() // unblock the server
		}
		errc <- err
	}()
	serr := s.Handshake()
	if serr != nil {
		a.Close() // unblock the client
	}
	cerr := <-errc
	if serr != nil || cerr != nil {
		return mtls.Identity{}, serr, cerr
	}
	chains := s.ConnectionState().VerifiedChains
	id, err := mtls.Of(chains[0][0])
	return id, err, nil
}

func TestMutualTLS(t *testing.T) {
	ca, err := mtls.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	n1, n2, viewer := mtls.Identity{Role: mtls.RoleNode, Name: "n1"}, mtls.Identity{Role: mtls.RoleNode, Name: "n2"}, mtls.Identity{Role: mtls.RoleViewer, Name: "ana"}
	dir := issue(t, ca, n1, n2, viewer)
	s1, s2, sv := load(t, dir, "n1"), load(t, dir, "n2"), load(t, dir, "ana")
	if s1.Identity() != n1 || sv.Identity() != viewer {
		t.Fatalf("identities %v %v", s1.Identity(), sv.Identity())
	}

	// n2 dials n1 expecting n1: both sides verified, by identity.
	id, serr, cerr := handshake(t, s1.ServerConfig(), s2.ClientConfig(mtls.WantIdentity(n1)))
	if serr != nil || cerr != nil || id != n2 {
		t.Fatalf("n2 → n1: %v %v, server saw %v", serr, cerr, id)
	}
	// Expecting n3 at n1's address: the client refuses the server.
	if _, _, cerr := handshake(t, s1.ServerConfig(), s2.ClientConfig(mtls.WantIdentity(mtls.Identity{Role: mtls.RoleNode, Name: "n3"}))); cerr == nil {
		t.Fatal("a client expecting n3 accepted n1")
	}
	// A certificate of another CA is refused both ways.
	other, _ := mtls.NewCA("other CA", time.Hour)
	odir := issue(t, other, n2)
	so := load(t, odir, "n2")
	if _, serr, _ := handshake(t, s1.ServerConfig(), so.ClientConfig(nil)); serr == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	if _, _, cerr := handshake(t, so.ServerConfig(), s1.ClientConfig(nil)); cerr == nil {
		t.Fatal("a server certificate of another CA was accepted")
	}
	// No client certificate at all is refused.
	if _, serr, _ := handshake(t, s1.ServerConfig(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}); serr == nil { //nolint:gosec
		t.Fatal("a client without a certificate was accepted")
	}

	// Roles: one table.
	for _, c := range []struct {
		id   mtls.Identity
		a    mtls.Action
		want bool
	}{
		{viewer, mtls.ActionRead, true}, {viewer, mtls.ActionCall, true}, {viewer, mtls.ActionOperate, false}, {viewer, mtls.ActionPeer, false},
		{mtls.Identity{Role: mtls.RoleOperator, Name: "o"}, mtls.ActionOperate, true},
		{mtls.Identity{Role: mtls.RoleAdmin, Name: "a"}, mtls.ActionOperate, true},
		{mtls.Identity{Role: mtls.RoleLocationd, Name: "l1"}, mtls.ActionOperate, true},
		{n1, mtls.ActionPeer, true}, {mtls.Identity{Role: mtls.RoleAdmin, Name: "a"}, mtls.ActionPeer, false},
	} {
		err := mtls.Allowed(c.id, c.a)
		if (err == nil) != c.want || err != nil && !errors.Is(err, mtls.ErrPermissionDenied) {
			t.Errorf("%v %s: %v, want allowed=%v", c.id, c.a, err, c.want)
		}
	}
}

// A renewed certificate is used by new handshakes after Reload; a broken
// one leaves the old in use.
func TestReload(t *testing.T) {
	ca, _ := mtls.NewCA("test CA", time.Hour)
	n1 := mtls.Identity{Role: mtls.RoleNode, Name: "n1"}
	dir := issue(t, ca, n1)
	r := load(t, dir, "n1")
	before := r.ServerConfig()
	c1, _ := before.GetCertificate(nil)
	l, _ := ca.Issue(n1, nil, 2*time.Hour)
	for name, b := range map[string][]byte{"n1.crt": l.CertPEM, "n1.key": l.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	c2, _ := before.GetCertificate(nil)
	if c1.Leaf.SerialNumber.Cmp(c2.Leaf.SerialNumber) == 0 {
		t.Fatal("the reloaded certificate is not used")
	}
	if err := os.WriteFile(filepath.Join(dir, "n1.crt"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Fatal("a broken certificate reloaded")
	}
	if c3, _ := before.GetCertificate(nil); c3.Leaf.SerialNumber.Cmp(c2.Leaf.SerialNumber) != 0 {
		t.Fatal("a failed reload replaced the certificate in use")
	}
}

func TestIssueRefusesBadIdentities(t *testing.T) {
	ca, _ := mtls.NewCA("test CA", time.Hour)
	for _, id := range []mtls.Identity{{Role: "root", Name: "x"}, {Role: mtls.RoleNode, Name: "../n1"}, {Role: mtls.RoleViewer}} {
		if _, err := ca.Issue(id, nil, time.Hour); !errors.Is(err, mtls.ErrBadIdentity) {
			t.Errorf("Issue(%v): %v, want ErrBadIdentity", id, err)
		}
	}
	dir := t.TempDir()
	if err := mtls.WriteNew(dir, map[string][]byte{"a.crt": []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := mtls.WriteNew(dir, map[string][]byte{"b.crt": []byte("y"), "a.crt": []byte("z")}); !errors.Is(err, mtls.ErrExists) {
		t.Fatalf("overwrite: %v, want ErrExists", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.crt")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatal("WriteNew wrote some files before refusing")
	}
}
