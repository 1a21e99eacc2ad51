package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Etcd is how a process reaches etcd: the endpoints, TLS (the etcd
// cluster's CA, and a client certificate: with etcd's --client-cert-auth
// its common name is the etcd user) and, instead of the certificate's
// name, an etcd user and its password.
type Etcd struct {
	Endpoints []string
	// CACert verifies etcd's server certificate (https:// endpoints).
	CACert string
	// Cert and Key are the client certificate.
	Cert, Key string
	// User and PasswordFile: etcd's user/password authentication (the
	// file holds the password; trailing white space is ignored).
	User, PasswordFile string
}

// Validate checks the relations between the fields.
func (e Etcd) Validate() error {
	switch {
	case len(e.Endpoints) == 0:
		return fmt.Errorf("mtls: no etcd endpoints")
	case (e.Cert == "") != (e.Key == ""):
		return fmt.Errorf("mtls: --etcd-cert and --etcd-key go together")
	case (e.User == "") != (e.PasswordFile == ""):
		return fmt.Errorf("mtls: --etcd-user and --etcd-password-file go together")
	case e.Cert != "" && e.CACert == "":
		return fmt.Errorf("mtls: --etcd-cert needs --etcd-cacert")
	}
	if e.CACert != "" {
		for _, ep := range e.Endpoints {
			if strings.HasPrefix(ep, "http://") {
				return fmt.Errorf("mtls: with --etcd-cacert every etcd endpoint is https:// (got %s)", ep)
			}
		}
	}
	return nil
}

// TLS reports whether etcd is reached over TLS: a CA is given, or an
// endpoint is https:// (verified against the system's roots then).
func (e Etcd) TLS() bool {
	if e.CACert != "" {
		return true
	}
	for _, ep := range e.Endpoints {
		if strings.HasPrefix(ep, "https://") {
			return true
		}
	}
	return false
}

// ClientConfig is the etcd client configuration: TLS and credentials read
// from their files now.
func (e Etcd) ClientConfig() (clientv3.Config, error) {
	if err := e.Validate(); err != nil {
		return clientv3.Config{}, err
	}
	cfg := clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if e.TLS() {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if e.CACert != "" {
			ca, err := os.ReadFile(e.CACert)
			if err != nil {
				return cfg, fmt.Errorf("mtls: etcd CA: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(ca) {
				return cfg, fmt.Errorf("mtls: %s holds no PEM certificate", e.CACert)
			}
		}
		if e.Cert != "" {
			c, err := tls.LoadX509KeyPair(e.Cert, e.Key)
			if err != nil {
				return cfg, fmt.Errorf("mtls: etcd client certificate: %w", err)
			}
			// The same check as Load's: a certificate of another CA is a
			// mistake of the files, said now, not a failed handshake later.
			if leaf, err := x509.ParseCertificate(c.Certificate[0]); err != nil {
				return cfg, fmt.Errorf("mtls: etcd client certificate: %w", err)
			} else if _, err := leaf.Verify(x509.VerifyOptions{Roots: tc.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				return cfg, fmt.Errorf("mtls: %s does not chain to %s: %w", e.Cert, e.CACert, err)
			}
			tc.Certificates = []tls.Certificate{c}
		}
		cfg.TLS = tc
	}
	if e.User != "" {
		pw, err := os.ReadFile(e.PasswordFile)
		if err != nil {
			return cfg, fmt.Errorf("mtls: etcd password: %w", err)
		}
		cfg.Username, cfg.Password = e.User, strings.TrimRight(string(pw), " \t\r\n")
	}
	return cfg, nil
}
