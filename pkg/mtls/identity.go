// Package mtls is meshloc's transport security: every process has an X.509
// identity from one cluster CA, every listener requires and verifies a
// client certificate, and what a caller may do is decided from the role its
// verified certificate names — never from a message field.
//
// An identity is the certificate's subject: the common name is the name
// (a node's owner id, a locationd member's name, a client's own name) and
// the organizational unit is the role: node, locationd, admin, operator or
// viewer (Role). The package makes certificates (CA, Issue), loads them
// into TLS configurations that reload a renewed certificate without
// dropping connections (Reloader), and reads the verified identity of a
// gRPC or HTTP peer (PeerIdentity, RequestIdentity). It does not decide
// which role may call what: Allowed is that one table.
//
// Peers are verified by identity, not by host name: a node dialling another
// checks that the certificate chains to the cluster CA and names the owner
// it meant to reach (etcd names owners and their addresses), so no DNS
// names are needed for meshloc's own connections. Certificates still carry
// host names and addresses (Issue's hosts) for tools that verify them the
// usual way: etcdctl, curl, grpcurl.
package mtls

import (
	"crypto/x509"
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Role is what an identity is.
type Role string

// Roles.
const (
	// RoleNode: a meshnode; its name is its owner id.
	RoleNode Role = "node"
	// RoleLocationd: a locationd process; its name is its member name. It
	// calls nodes' AdminService on behalf of verified API callers.
	RoleLocationd Role = "locationd"
	// RoleAdmin may do everything.
	RoleAdmin Role = "admin"
	// RoleOperator may read, call objects, relocate, drain, rebalance and
	// change groups.
	RoleOperator Role = "operator"
	// RoleViewer may read and call objects.
	RoleViewer Role = "viewer"
)

// Roles lists every role.
var Roles = []Role{RoleNode, RoleLocationd, RoleAdmin, RoleOperator, RoleViewer}

// Organization is the subject's organization of every certificate Issue
// makes (informational: the CA is what is trusted).
const Organization = "meshloc"

// Errors of identities.
var (
	// ErrNoIdentity: the peer presented no verified certificate.
	ErrNoIdentity = wire.Sentinel(pb.Code_CODE_PERMISSION_DENIED, "mtls: no verified client certificate")
	// ErrBadIdentity: the certificate names no role this package knows,
	// or no valid name.
	ErrBadIdentity = wire.Sentinel(pb.Code_CODE_PERMISSION_DENIED, "mtls: certificate names no meshloc identity")
	// ErrPermissionDenied: the identity's role may not do what it asked.
	ErrPermissionDenied = wire.Sentinel(pb.Code_CODE_PERMISSION_DENIED, "mtls: permission denied")
)

// Identity is who a verified certificate says its holder is.
type Identity struct {
	Role Role
	Name string
}

func (id Identity) String() string { return string(id.Role) + ":" + id.Name }

// Valid checks the role and the name (a node's name is an owner id).
func (id Identity) Valid() error {
	known := false
	for _, r := range Roles {
		known = known || r == id.Role
	}
	switch {
	case !known:
		return fmt.Errorf("%w: role %q", ErrBadIdentity, id.Role)
	case id.Role == RoleNode:
		if err := keyspace.ValidateOwnerID(id.Name); err != nil {
			return fmt.Errorf("%w: node name: %v", ErrBadIdentity, err)
		}
	case id.Name == "" || len(id.Name) > 128:
		return fmt.Errorf("%w: name of %d bytes", ErrBadIdentity, len(id.Name))
	}
	return nil
}

// Of is the identity a certificate names (its chain must have been
// verified already).
func Of(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Identity{}, ErrNoIdentity
	}
	if len(cert.Subject.OrganizationalUnit) != 1 {
		return Identity{}, fmt.Errorf("%w: %d organizational units, want one (the role)", ErrBadIdentity, len(cert.Subject.OrganizationalUnit))
	}
	id := Identity{Role: Role(cert.Subject.OrganizationalUnit[0]), Name: cert.Subject.CommonName}
	if err := id.Valid(); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// Action is something a caller asks for; Allowed says which roles may.
type Action string

// Actions.
const (
	// ActionRead: reads (the location API's GETs, relocation lists).
	ActionRead Action = "read"
	// ActionCall: calls of objects (CallService).
	ActionCall Action = "call"
	// ActionOperate: relocate, drain, rebalance, group changes.
	ActionOperate Action = "operate"
	// ActionPeer: the node-to-node protocol (PeerService).
	ActionPeer Action = "peer"
)

// allowed is the one table of who may do what.
var allowed = map[Action][]Role{
	ActionRead:    {RoleViewer, RoleOperator, RoleAdmin, RoleLocationd, RoleNode},
	ActionCall:    {RoleViewer, RoleOperator, RoleAdmin, RoleLocationd, RoleNode},
	ActionOperate: {RoleOperator, RoleAdmin, RoleLocationd},
	ActionPeer:    {RoleNode},
}

// Allowed reports whether id may do a; an error wrapping
// ErrPermissionDenied says why not.
func Allowed(id Identity, a Action) error {
	for _, r := range allowed[a] {
		if r == id.Role {
			return nil
		}
	}
	return fmt.Errorf("%w: %s may not %s", ErrPermissionDenied, id, a)
}
