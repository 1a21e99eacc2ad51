// Package etcdauth sets up etcd's authentication for one meshloc cluster:
// the users and roles that limit each kind of process to the cluster's
// prefix, and each node to its own owner key, then auth enable. locationd
// runs it on its embedded etcd at its first start; for an external etcd,
// `locationd --etcd-setup-auth` runs it once with the root user's
// credentials. A node added later gets its user with `meshctl etcd
// add-nodes` (root's credentials) — AddNodes.
//
// Users have no password: they authenticate with client certificates whose
// common name is the user (etcd's --client-cert-auth); `meshctl certs init`
// makes those certificates (etcd-root, etcd-locationd, etcd-watch, and
// etcd-node-<name> for each node).
//
//	user                 roles                                may
//	root                 root                                 everything (etcdctl with the admin's credentials)
//	meshloc-node-<name>  meshloc-node, meshloc-node-<name>    read <prefix>/<cluster>/; write its records, intents,
//	                                                          catalog and durable state; write owners/<name> only
//	meshloc-locationd    meshloc-locationd                    read and write <prefix>/<cluster>/ only
//	meshloc-watch        meshloc-watch                        read <prefix>/<cluster>/authority/ and owners/ only (a watch fan-out)
//
// A node's user cannot register, refresh or delete another node's owner
// key, nor revoke its lease (etcd asks for write permission on every key a
// lease holds). What a node may write in the shared ranges — any record,
// as a relocation's cutover needs — is fenced in the protocol instead: an
// owner that sees its record rewritten or corrupt stops serving the
// object.
package etcdauth

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// The etcd users (and their roles, of the same names).
const (
	UserRoot      = "root"
	UserLocationd = "meshloc-locationd"
	UserWatch     = "meshloc-watch"
	// RoleNode is the role every node's user holds (the shared ranges).
	RoleNode = "meshloc-node"
)

// NodeUser is node name's etcd user, and the name of the role that lets it
// write its owner key.
func NodeUser(name string) string { return mtls.EtcdNodeUser(name) }

// Setup creates the users and roles (those that exist are kept, their
// permissions set again) and enables authentication. It must run with
// authentication off or as root. It reports whether it enabled it now.
func Setup(ctx context.Context, c *clientv3.Client, keys keyspace.Keys, nodes []string) (bool, error) {
	if err := validNodes(nodes); err != nil {
		return false, err
	}
	st, err := c.AuthStatus(ctx)
	if err != nil {
		return false, fmt.Errorf("etcdauth: status: %w", err)
	}
	if st.Enabled {
		return false, nil
	}
	if err := addUser(ctx, c, UserRoot, "root"); err != nil {
		return false, err
	}
	base := keys.Base()
	if err := addUser(ctx, c, UserLocationd, UserLocationd); err != nil {
		return false, err
	}
	if err := grant(ctx, c, UserLocationd, base, clientv3.GetPrefixRangeEnd(base), rw); err != nil {
		return false, err
	}
	// The nodes' shared role: read everything of the cluster, write the
	// ranges a relocation, an activation and a durable object write.
	if err := addRole(ctx, c, RoleNode); err != nil {
		return false, err
	}
	if err := grant(ctx, c, RoleNode, base, clientv3.GetPrefixRangeEnd(base), ro); err != nil {
		return false, err
	}
	for _, p := range []string{keys.AuthorityPrefix(), keys.RelocationsPrefix(), keys.CatalogPrefix(), keys.StatePrefix()} {
		if err := grant(ctx, c, RoleNode, p, clientv3.GetPrefixRangeEnd(p), rw); err != nil {
			return false, err
		}
	}
	if err := AddNodes(ctx, c, keys, nodes); err != nil {
		return false, err
	}
	// A watch fan-out (locationd watch-proxy) reads only what it serves.
	if err := addUser(ctx, c, UserWatch, UserWatch); err != nil {
		return false, err
	}
	for _, p := range []string{keys.AuthorityPrefix(), keys.OwnersPrefix()} {
		if err := grant(ctx, c, UserWatch, p, clientv3.GetPrefixRangeEnd(p), ro); err != nil {
			return false, err
		}
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return false, fmt.Errorf("etcdauth: enable: %w", err)
	}
	return true, nil
}

// AddNodes gives each node its etcd user (NodeUser): the nodes' shared
// role, and a role of its own that writes its owner key and nothing else.
// It must run with authentication off or as root; a user that exists has
// its roles granted again.
func AddNodes(ctx context.Context, c *clientv3.Client, keys keyspace.Keys, nodes []string) error {
	if err := validNodes(nodes); err != nil {
		return err
	}
	for _, n := range nodes {
		u := NodeUser(n)
		if err := addUser(ctx, c, u, u); err != nil {
			return err
		}
		if err := grant(ctx, c, u, keys.Owner(n), "", rw); err != nil {
			return err
		}
		if _, err := c.UserGrantRole(ctx, u, RoleNode); err != nil {
			return fmt.Errorf("etcdauth: grant %s to %s: %w", RoleNode, u, err)
		}
	}
	return nil
}

// ErrInvalidNode: a node name that is not an owner id; nothing was done.
var ErrInvalidNode = errors.New("etcdauth: invalid node name")

func validNodes(nodes []string) error {
	for _, n := range nodes {
		if err := keyspace.ValidateOwnerID(n); err != nil {
			return fmt.Errorf("%w %q: %w", ErrInvalidNode, n, err)
		}
	}
	return nil
}

func addRole(ctx context.Context, c *clientv3.Client, role string) error {
	if _, err := c.RoleAdd(ctx, role); err != nil && !errors.Is(err, rpctypes.ErrGRPCRoleAlreadyExist) && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcdauth: role %s: %w", role, err)
	}
	return nil
}

// addUser creates user (no password: certificate authentication) and role,
// and grants it role.
func addUser(ctx context.Context, c *clientv3.Client, user, role string) error {
	if err := addRole(ctx, c, role); err != nil {
		return err
	}
	if _, err := c.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil &&
		!errors.Is(err, rpctypes.ErrGRPCUserAlreadyExist) && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("etcdauth: user %s: %w", user, err)
	}
	if _, err := c.UserGrantRole(ctx, user, role); err != nil {
		return fmt.Errorf("etcdauth: grant %s to %s: %w", role, user, err)
	}
	return nil
}

var (
	rw = clientv3.PermissionType(clientv3.PermReadWrite)
	ro = clientv3.PermissionType(clientv3.PermRead)
)

// grant lets role do perm on [key, end) (end "": key alone).
func grant(ctx context.Context, c *clientv3.Client, role, key, end string, perm clientv3.PermissionType) error {
	if _, err := c.RoleGrantPermission(ctx, role, key, end, perm); err != nil {
		return fmt.Errorf("etcdauth: grant %s on %s: %w", role, key, err)
	}
	return nil
}
