package mtls

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Revocation: a certificate revocation list (DER, as etcd reads it; PEM is
// read too) signed by the
// cluster CA lists the serial numbers of withdrawn certificates (a lost
// machine's node certificate, a departed operator's). Every listener and
// every client of a process given --crl-file refuses a peer whose
// certificate is listed; the list is read again with the certificate, on
// SIGHUP (Reloader.Reload). `meshctl certs revoke` writes it (Revoke).

// CRLFile is the name of the CA's revocation list in a certificate
// directory.
const CRLFile = "ca.crl"

// ErrRevoked: the peer's certificate is on the revocation list.
var ErrRevoked = errors.New("mtls: certificate revoked")

// revoked is a loaded revocation list: the serials it lists.
type revoked map[string]struct{}

func (r revoked) has(c *x509.Certificate) bool {
	_, ok := r[c.SerialNumber.String()]
	return ok
}

// loadCRL reads a PEM CRL and checks that one of cas signed it.
func loadCRL(path string, cas []*x509.Certificate) (revoked, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mtls: CRL: %w", err)
	}
	crl, err := parseCRL(b)
	if err != nil {
		return nil, fmt.Errorf("mtls: %s: %w", path, err)
	}
	signed := false
	for _, ca := range cas {
		if crl.CheckSignatureFrom(ca) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return nil, fmt.Errorf("mtls: %s is not signed by the cluster CA", path)
	}
	out := revoked{}
	for _, e := range crl.RevokedCertificateEntries {
		out[e.SerialNumber.String()] = struct{}{}
	}
	return out, nil
}

// parseCRL reads a CRL in DER (as Revoke writes it: etcd reads only DER)
// or PEM ("X509 CRL").
func parseCRL(b []byte) (*x509.RevocationList, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "X509 CRL" {
			return nil, fmt.Errorf("a PEM %s block, not an X509 CRL", blk.Type)
		}
		b = blk.Bytes
	}
	return x509.ParseRevocationList(b)
}

// parseCerts are the PEM certificates of b.
func parseCerts(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil && blk.Type == "CERTIFICATE" {
			out = append(out, c)
		}
	}
}

// Revoke adds the certificates named (files <name>.crt of dir) to dir's
// revocation list (ca.crl), signed with dir's ca.key; with no names it
// writes the list as it is (an empty one at first). The list's number
// grows with each write; it is valid for validFor (default a year). It
// returns the serials added. Nothing is written if a name has no
// certificate or one not issued by the CA.
func Revoke(dir string, names []string, validFor time.Duration) ([]*big.Int, error) {
	if validFor <= 0 {
		validFor = 365 * 24 * time.Hour
	}
	ca, err := LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("mtls: the CA of %s: %w", dir, err)
	}
	tmpl := &x509.RevocationList{Number: big.NewInt(1)}
	path := filepath.Join(dir, CRLFile)
	if b, err := os.ReadFile(path); err == nil {
		old, err := parseCRL(b)
		if err != nil {
			return nil, fmt.Errorf("mtls: %s: %w", path, err)
		}
		if err := old.CheckSignatureFrom(ca.Cert); err != nil {
			return nil, fmt.Errorf("mtls: %s is not signed by this CA: %w", path, err)
		}
		tmpl.RevokedCertificateEntries = old.RevokedCertificateEntries
		if old.Number != nil {
			tmpl.Number = new(big.Int).Add(old.Number, big.NewInt(1))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	now := time.Now()
	var added []*big.Int
	for _, n := range names {
		cf := filepath.Join(dir, n+".crt")
		b, err := os.ReadFile(cf)
		if err != nil {
			return nil, fmt.Errorf("mtls: revoke %s: %w", n, err)
		}
		certs := parseCerts(b)
		if len(certs) == 0 {
			return nil, fmt.Errorf("mtls: revoke %s: %s holds no certificate", n, cf)
		}
		if err := certs[0].CheckSignatureFrom(ca.Cert); err != nil {
			return nil, fmt.Errorf("mtls: revoke %s: not issued by this CA: %w", n, err)
		}
		sn := certs[0].SerialNumber
		dup := false
		for _, e := range tmpl.RevokedCertificateEntries {
			dup = dup || e.SerialNumber.Cmp(sn) == 0
		}
		if !dup {
			tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: sn, RevocationTime: now})
			added = append(added, sn)
		}
	}
	tmpl.ThisUpdate, tmpl.NextUpdate = now.Add(-time.Minute), now.Add(validFor)
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("mtls: CRL: %w", err)
	}
	// Written whole, then renamed: a process reloading never reads half a list.
	tmp, err := os.CreateTemp(dir, ".ca.crl-")
	if err != nil {
		return nil, err
	}
	_, err = tmp.Write(der)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	return added, nil
}
