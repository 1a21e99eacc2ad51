// Package etcdauth sets up etcd's authentication for one meshloc cluster:
// the users and roles that limit each kind of process to the cluster's
// prefix, then auth enable. locationd runs it on its embedded etcd at its
// first start; for an external etcd, `locationd --etcd-setup-auth` runs it
// once with the root user's credentials.
//
// Users have no password: they authenticate with client certificates whose
// common name is the user (etcd's --client-cert-auth); `meshctl certs init`
// makes those certificates (etcd-root, etcd-node, etcd-locationd).
//
//	user               role               may
//	root               root               everything (etcdctl with the admin's credentials)
//	meshloc-node       meshloc-node       read and write <prefix>/<cluster>/ only
//	meshloc-locationd  meshloc-locationd  read and write <prefix>/<cluster>/ only
package etcdauth

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// The etcd users (and their roles, of the same names).
const (
	UserRoot      = "root"
	UserNode      = "meshloc-node"
	UserLocationd = "meshloc-locationd"
)

// Setup creates the users and roles (those that exist are kept, their
// permissions set again) and enables authentication. It must run with
// authentication off or as root. It reports whether it enabled it now.
func Setup(ctx context.Context, c *clientv3.Client, keys keyspace.Keys) (bool, error) {
	st, err := c.AuthStatus(ctx)
	if err != nil {
		return false, fmt.Errorf("etcdauth: status: %w", err)
	}
	if st.Enabled {
		return false, nil
	}
	add := func(user, role string) error {
		if _, err := c.RoleAdd(ctx, role); err != nil && !errors.Is(err, rpctypes.ErrGRPCRoleAlreadyExist) && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			return fmt.Errorf("etcdauth: role %s: %w", role, err)
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
	if err := add(UserRoot, "root"); err != nil {
		return false, err
	}
	base := keys.Base()
	for _, u := range []string{UserNode, UserLocationd} {
		if err := add(u, u); err != nil {
			return false, err
		}
		if _, err := c.RoleGrantPermission(ctx, u, base, clientv3.GetPrefixRangeEnd(base), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return false, fmt.Errorf("etcdauth: grant %s on %s: %w", u, base, err)
		}
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return false, fmt.Errorf("etcdauth: enable: %w", err)
	}
	return true, nil
}
