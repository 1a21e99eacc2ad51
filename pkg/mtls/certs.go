package mtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	pkcs12 "software.sslmate.com/src/go-pkcs12"
)

// CA is a cluster certificate authority: the one root every process trusts.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert, PEM-encoded (ca.crt).
	CertPEM []byte
}

// Leaf is an issued certificate and its private key, PEM-encoded.
type Leaf struct {
	CertPEM []byte
	KeyPEM  []byte
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// NewCA makes a self-signed ECDSA P-256 CA valid for validFor.
func NewCA(name string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: name, Organization: []string{Organization}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads a CA certificate and its key (to issue more certificates).
func LoadCA(certFile, keyFile string) (*CA, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, fmt.Errorf("mtls: %s or %s holds no PEM block", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: cb}, nil
}

// KeyPEM is the CA's private key, PEM-encoded (ca.key).
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// Issue makes an ECDSA P-256 certificate for id, valid for validFor, usable
// by servers and clients alike. hosts are DNS names or IP addresses it is
// also valid for (tools that verify host names: etcdctl, curl, grpcurl); a
// node's or a locationd's name is always one of its DNS names.
func (ca *CA) Issue(id Identity, hosts []string, validFor time.Duration) (Leaf, error) {
	if err := id.Valid(); err != nil {
		return Leaf{}, err
	}
	if id.Role == RoleNode || id.Role == RoleLocationd {
		hosts = append([]string{id.Name}, hosts...)
	}
	return ca.issue(pkix.Name{CommonName: id.Name, OrganizationalUnit: []string{string(id.Role)}, Organization: []string{Organization}}, hosts, validFor)
}

func (ca *CA) issue(subject pkix.Name, hosts []string, validFor time.Duration) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	sn, err := serial()
	if err != nil {
		return Leaf{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: subject,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Leaf{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}, nil
}

// IssueEtcdUser makes a client certificate for etcd's certificate
// authentication: its common name is the etcd user. Its organizational
// unit is "etcd": it names no meshloc identity, so no meshloc port accepts
// it.
func (ca *CA) IssueEtcdUser(user string, validFor time.Duration) (Leaf, error) {
	if user == "" || len(user) > 128 {
		return Leaf{}, fmt.Errorf("%w: etcd user %q", ErrBadIdentity, user)
	}
	return ca.issue(pkix.Name{CommonName: user, OrganizationalUnit: []string{"etcd"}, Organization: []string{Organization}}, nil, validFor)
}

// ErrExists: a file WriteNew would write is there already (nothing was
// overwritten).
var ErrExists = errors.New("mtls: file exists")

// WriteNew writes each file (name → content) into dir, keys readable by
// the owner only; it writes nothing if any of them exists already.
func WriteNew(dir string, files map[string][]byte) error {
	for name := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("%w: %s", ErrExists, filepath.Join(dir, name))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		mode := os.FileMode(0o644)
		if filepath.Ext(name) == ".key" {
			mode = 0o600
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// InitOptions says which certificates Init makes.
type InitOptions struct {
	// Nodes and Locationd name the processes (owner ids, member names).
	Nodes, Locationd []string
	// Etcd names the members of an external etcd cluster: each gets a
	// server certificate (for its client and peer ports; organizational
	// unit "etcd", no meshloc identity) valid for its name and Hosts.
	Etcd []string
	// Hosts are the DNS names and addresses every server certificate is
	// also valid for (besides each process's own name); by default
	// localhost and 127.0.0.1.
	Hosts []string
	// ValidFor is how long every certificate is valid (default a year).
	ValidFor time.Duration
	// Clients are client identities (admin, operator, viewer roles) to
	// issue besides; Init adds one per role, named after it.
	Clients []Identity
	// P12Password, if set, also writes <name>.p12 (PKCS#12: certificate,
	// key and CA, for a browser) for every client certificate, encrypted
	// with it.
	P12Password string
}

// EtcdUsers are the etcd users Init makes client certificates for, by the
// file name (without extension) they go to; besides, each node gets its
// own (EtcdNodeFile, EtcdNodeUser).
var EtcdUsers = map[string]string{"etcd-root": "root", "etcd-locationd": "meshloc-locationd", "etcd-watch": "meshloc-watch"}

// EtcdNodeUser is node name's own etcd user: it may write that node's owner
// key and no other (internal/etcdauth).
func EtcdNodeUser(name string) string { return "meshloc-node-" + name }

// EtcdNodeFile is the file name (without extension) of node name's etcd
// client certificate.
func EtcdNodeFile(name string) string { return "etcd-node-" + name }

// ClientRoles are the user certificates Init makes, one per role, named
// after it.
var ClientRoles = []Role{RoleAdmin, RoleOperator, RoleViewer}

// Init makes a new CA and every certificate of a cluster in dir: ca.crt
// and ca.key; <name>.crt/.key for each node and locationd; admin,
// operator and viewer client certificates; and etcd-root, etcd-locationd,
// etcd-watch and etcd-node-<node> for each node, for etcd's certificate
// authentication. It writes nothing if any of those files exists. It
// returns the names written.
func Init(dir string, o InitOptions) ([]string, error) {
	if o.ValidFor <= 0 {
		o.ValidFor = 365 * 24 * time.Hour
	}
	ca, err := NewCA("meshloc cluster CA", o.ValidFor)
	if err != nil {
		return nil, err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": caKey}
	for _, r := range ClientRoles {
		o.Clients = append(o.Clients, Identity{Role: r, Name: string(r)})
	}
	users := maps.Clone(EtcdUsers)
	return issueAll(ca, dir, o, files, users)
}

// Add issues more certificates with the CA of dir (ca.crt, ca.key): for
// new nodes (with their etcd users' certificates), locationd members,
// external etcd members and clients (o.Clients). Like Init it writes
// nothing if any file exists.
func Add(dir string, o InitOptions) ([]string, error) {
	if o.ValidFor <= 0 {
		o.ValidFor = 365 * 24 * time.Hour
	}
	ca, err := LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("mtls: the CA of %s: %w", dir, err)
	}
	return issueAll(ca, dir, o, map[string][]byte{}, map[string]string{})
}

// issueAll issues o's certificates (and users' etcd certificates, by file
// name) into files and writes them all into dir.
func issueAll(ca *CA, dir string, o InitOptions, files map[string][]byte, users map[string]string) ([]string, error) {
	if o.Hosts == nil {
		o.Hosts = []string{"localhost", "127.0.0.1"}
	}
	put := func(name string, l Leaf) error {
		if _, dup := files[name+".crt"]; dup {
			return fmt.Errorf("mtls: %s named twice", name)
		}
		files[name+".crt"], files[name+".key"] = l.CertPEM, l.KeyPEM
		return nil
	}
	var ids []Identity
	for _, n := range o.Nodes {
		ids = append(ids, Identity{Role: RoleNode, Name: n})
		users[EtcdNodeFile(n)] = EtcdNodeUser(n)
	}
	for _, n := range o.Locationd {
		ids = append(ids, Identity{Role: RoleLocationd, Name: n})
	}
	ids = append(ids, o.Clients...)
	for _, id := range ids {
		var hosts []string
		if id.Role == RoleNode || id.Role == RoleLocationd {
			hosts = o.Hosts
		}
		l, err := ca.Issue(id, hosts, o.ValidFor)
		if err != nil {
			return nil, err
		}
		if err := put(id.Name, l); err != nil {
			return nil, err
		}
		if o.P12Password != "" && id.Role != RoleNode && id.Role != RoleLocationd {
			p12, err := l.PKCS12(ca, o.P12Password)
			if err != nil {
				return nil, err
			}
			files[id.Name+".p12"] = p12
		}
	}
	for _, m := range o.Etcd {
		l, err := ca.issue(pkix.Name{CommonName: m, OrganizationalUnit: []string{"etcd"}, Organization: []string{Organization}}, append([]string{m}, o.Hosts...), o.ValidFor)
		if err != nil {
			return nil, err
		}
		if err := put(m, l); err != nil {
			return nil, err
		}
	}
	for file, user := range users {
		l, err := ca.IssueEtcdUser(user, o.ValidFor)
		if err != nil {
			return nil, err
		}
		if err := put(file, l); err != nil {
			return nil, err
		}
	}
	if err := WriteNew(dir, files); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// PKCS12 is the certificate, its key and the CA in one PKCS#12 file
// encrypted with password (modern encryption: AES-256, PBKDF2), for
// importing into a browser.
func (l Leaf) PKCS12(ca *CA, password string) ([]byte, error) {
	cb, _ := pem.Decode(l.CertPEM)
	kb, _ := pem.Decode(l.KeyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("mtls: PKCS#12: no PEM certificate or key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if k, err2 := x509.ParseECPrivateKey(kb.Bytes); err2 == nil {
			key, err = k, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mtls: PKCS#12: %w", err)
	}
	return pkcs12.Modern.Encode(key, cert, []*x509.Certificate{ca.Cert}, password)
}
