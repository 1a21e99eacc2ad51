package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Files names a process's certificate and key, and the cluster CA that
// every peer's certificate must chain to.
type Files struct {
	CA, Cert, Key string
	// CRL, if set, is the CA's revocation list (PEM): a peer whose
	// certificate it lists is refused (crl.go).
	CRL string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Validate checks that all three files are named, or none.
func (f Files) Validate() error {
	if f.Enabled() && (f.CA == "" || f.Cert == "" || f.Key == "") {
		return fmt.Errorf("mtls: a CA, a certificate and a key are needed together (got CA %q, certificate %q, key %q)", f.CA, f.Cert, f.Key)
	}
	if f.CRL != "" && !f.Enabled() {
		return fmt.Errorf("mtls: a revocation list (%s) means nothing without a CA, a certificate and a key", f.CRL)
	}
	return nil
}

// Reloader holds a process's certificate for its TLS configurations; Reload
// reads a renewed one (on SIGHUP): new handshakes use it, established
// connections (a relocation in flight) are not touched. The revocation
// list, if any, is read again with it. The CA is read once: a new CA
// needs a restart.
type Reloader struct {
	files   Files
	pool    *x509.CertPool
	cas     []*x509.Certificate
	cert    atomic.Pointer[tls.Certificate]
	self    atomic.Pointer[Identity]
	revoked atomic.Pointer[revoked]
}

// Load reads the files; the certificate must chain to the CA and name a
// meshloc identity.
func Load(f Files) (*Reloader, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if !f.Enabled() {
		return nil, errors.New("mtls: no certificate files")
	}
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("mtls: %s holds no PEM certificate", f.CA)
	}
	r := &Reloader{files: f, pool: pool, cas: parseCerts(ca)}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the certificate, key and revocation list again; on error
// the ones in use stay.
func (r *Reloader) Reload() error {
	var crl revoked
	if r.files.CRL != "" {
		var err error
		if crl, err = loadCRL(r.files.CRL, r.cas); err != nil {
			return err
		}
	}
	c, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: r.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("mtls: %s does not chain to %s: %w", r.files.Cert, r.files.CA, err)
	}
	id, err := Of(leaf)
	if err != nil {
		return fmt.Errorf("mtls: %s: %w", r.files.Cert, err)
	}
	c.Leaf = leaf
	r.cert.Store(&c)
	r.self.Store(&id)
	r.revoked.Store(&crl)
	return nil
}

// checkRevoked refuses a peer whose certificate the revocation list names.
func (r *Reloader) checkRevoked(certs []*x509.Certificate) error {
	if crl := r.revoked.Load(); crl != nil && len(certs) > 0 && (*crl).has(certs[0]) {
		return fmt.Errorf("%w: %s (serial %s)", ErrRevoked, certs[0].Subject, certs[0].SerialNumber)
	}
	return nil
}

// Identity is the identity of the certificate in use.
func (r *Reloader) Identity() Identity { return *r.self.Load() }

// Pool is the CA as a certificate pool.
func (r *Reloader) Pool() *x509.CertPool { return r.pool }

// Files the reloader reads.
func (r *Reloader) Files() Files { return r.files }

// ServerConfig requires a client certificate that chains to the CA (and
// names an identity: checked per request, PeerIdentity).
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  r.pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return r.cert.Load(), nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error { return r.checkRevoked(cs.PeerCertificates) },
	}
}

// ClientConfig presents this process's certificate and accepts a server
// whose certificate chains to the CA and names an identity that want
// accepts (nil: any). Servers are verified by identity, not by host name.
func (r *Reloader) ClientConfig(want func(Identity) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The standard host name check is replaced by VerifyConnection:
		// the chain to the CA and the identity the certificate names.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.cert.Load(), nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := r.verify(cs.PeerCertificates)
			if err != nil {
				return err
			}
			if want != nil {
				return want(id)
			}
			return nil
		},
	}
}

// verify checks a peer's chain against the CA and returns its identity.
func (r *Reloader) verify(certs []*x509.Certificate) (Identity, error) {
	if len(certs) == 0 {
		return Identity{}, ErrNoIdentity
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: r.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return Identity{}, fmt.Errorf("mtls: server certificate: %w", err)
	}
	if err := r.checkRevoked(certs); err != nil {
		return Identity{}, err
	}
	return Of(certs[0])
}

// WantIdentity accepts exactly id.
func WantIdentity(id Identity) func(Identity) error {
	return func(got Identity) error {
		if got != id {
			return fmt.Errorf("mtls: the server is %s, not %s", got, id)
		}
		return nil
	}
}

// WantRole accepts any identity of one of roles.
func WantRole(roles ...Role) func(Identity) error {
	return func(got Identity) error {
		for _, r := range roles {
			if got.Role == r {
				return nil
			}
		}
		return fmt.Errorf("mtls: the server is %s, not a %v", got, roles)
	}
}

// ServerCredentials are gRPC server credentials requiring mTLS.
func (r *Reloader) ServerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(r.ServerConfig())
}

// ClientCredentials are gRPC client credentials (ClientConfig).
func (r *Reloader) ClientCredentials(want func(Identity) error) credentials.TransportCredentials {
	return credentials.NewTLS(r.ClientConfig(want))
}

// PeerIdentity is the verified identity of a gRPC call's peer
// (ErrNoIdentity on a connection without one).
func PeerIdentity(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, ErrNoIdentity
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return Identity{}, ErrNoIdentity
	}
	return Of(ti.State.VerifiedChains[0][0])
}

// PeerNode is the node name a gRPC peer's verified certificate names, ""
// without TLS or for another role.
func PeerNode(ctx context.Context) string {
	id, err := PeerIdentity(ctx)
	if err != nil || id.Role != RoleNode {
		return ""
	}
	return id.Name
}

// RequestIdentity is the verified identity of an HTTPS request's client.
func RequestIdentity(r *http.Request) (Identity, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return Identity{}, ErrNoIdentity
	}
	return Of(r.TLS.VerifiedChains[0][0])
}

// Loopback reports whether a listen address (host:port) binds loopback
// only: localhost, 127.0.0.0/8 or ::1. An empty host or 0.0.0.0 binds every
// interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
