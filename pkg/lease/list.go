package lease

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// ListOwners reads every live owner at one revision, sorted by owner id.
// An undecodable descriptor is returned with only its OwnerID set, so that an
// operator still sees the owner.
func ListOwners(ctx context.Context, c *clientv3.Client, keys keyspace.Keys) ([]Owner, int64, error) {
	resp, err := c.Get(ctx, keys.OwnersPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, 0, fmt.Errorf("lease: list owners: %w", err)
	}
	out := make([]Owner, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		id, err := keys.ParseOwner(string(kv.Key))
		if err != nil {
			continue
		}
		d, err := DecodeDescriptor(kv.Value)
		if err != nil {
			d = Descriptor{OwnerID: id}
		}
		out = append(out, Owner{Descriptor: d, Generation: kv.CreateRevision, ModRevision: kv.ModRevision, LeaseID: kv.Lease})
	}
	return out, resp.Header.Revision, nil
}
