package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Taking the owner key: a lease, the key created with it, or the key in
// the way and waiting for it to go.

// acquire grants a lease and tries to create the owner key with it. On
// success it fills k (lease, generation, state) and returns nil. If the key
// exists it revokes the new lease and returns the key in the way, with the
// revision of the refused Txn.
func (k *Keeper) acquire(ctx context.Context) (*DuplicateOwnerError, int64, error) {
	ttlSec := int64((k.cfg.TTL + time.Second - 1) / time.Second)
	gctx, cancel := context.WithTimeout(ctx, k.cfg.RequestTimeout)
	sentAt := k.clock.Now()
	g, err := k.c.Grant(gctx, ttlSec)
	cancel()
	if err != nil {
		// Uncertain: a lease may have been granted; unused, it expires by itself.
		return nil, 0, fmt.Errorf("lease: start %s: grant: %w", k.cfg.OwnerID, err)
	}
	value := string(k.cfg.Descriptor.Encode())
	tctx, cancel := context.WithTimeout(ctx, k.cfg.RequestTimeout)
	resp, err := k.c.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.key), "=", 0)).
		Then(clientv3.OpPut(k.key, value, clientv3.WithLease(g.ID))).
		Else(clientv3.OpGet(k.key)).
		Commit()
	cancel()
	var gen, modRev int64
	switch {
	case err != nil:
		// Uncertain: the Put may have been applied. A key bound to our new lease
		// can only be ours; anything else means we do not hold it.
		rctx, cancel := context.WithTimeout(ctx, k.cfg.RequestTimeout)
		gr, gerr := k.c.Get(rctx, k.key)
		cancel()
		if gerr != nil || len(gr.Kvs) == 0 || gr.Kvs[0].Lease != int64(g.ID) {
			k.revoke(ctx, g.ID)
			return nil, 0, fmt.Errorf("lease: start %s: create %s: %w", k.cfg.OwnerID, k.key, err)
		}
		gen, modRev = gr.Kvs[0].CreateRevision, gr.Kvs[0].ModRevision
	case !resp.Succeeded:
		k.revoke(ctx, g.ID)
		held := &DuplicateOwnerError{OwnerID: k.cfg.OwnerID, Descriptor: Descriptor{OwnerID: k.cfg.OwnerID}}
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			held.Generation = kvs[0].CreateRevision
			if d, derr := DecodeDescriptor(kvs[0].Value); derr == nil {
				held.Descriptor = d
			}
		}
		return held, resp.Header.Revision, nil
	default:
		// The Put is the only write of the Txn: its revision is the key's
		// CreateRevision, i.e. the generation.
		gen, modRev = resp.Header.Revision, resp.Header.Revision
	}
	k.leaseID, k.gen, k.modRev = g.ID, gen, modRev
	k.desc = cloneDescriptor(k.cfg.Descriptor)
	k.st = newState(k.cfg.OwnerID, int64(g.ID), k.cfg.Margin, sentAt, time.Duration(g.TTL)*time.Second)
	return nil, 0, nil
}

// waitGone waits up to d for the owner key to be deleted after revision rev.
// It reports false when d ran out first.
func (k *Keeper) waitGone(ctx context.Context, rev int64, d time.Duration) (bool, error) {
	t := k.clock.NewTimer(d)
	defer t.Stop()
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := k.c.Watch(wctx, k.key, clientv3.WithRev(rev+1))
		gone, resume, err := k.awaitDelete(ctx, wch, t.C())
		cancel()
		if err != nil || gone || resume == 0 {
			return gone, err
		}
		rev = resume
	}
}

// awaitDelete reads wch until a DELETE of the key, the timer, or ctx. If the
// watch ends (compaction, lost leader) it reads the key again: gone, or the
// revision to resume watching after.
func (k *Keeper) awaitDelete(ctx context.Context, wch clientv3.WatchChan, timeout <-chan time.Time) (gone bool, resume int64, err error) {
	for {
		select {
		case <-ctx.Done():
			return false, 0, ctx.Err()
		case <-timeout:
			return false, 0, nil
		case wr, ok := <-wch:
			if ok && wr.Err() == nil {
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						return true, 0, nil
					}
				}
				continue
			}
			if ctx.Err() != nil {
				return false, 0, ctx.Err()
			}
			rctx, cancel := context.WithTimeout(ctx, k.cfg.RequestTimeout)
			gr, gerr := k.c.Get(rctx, k.key)
			cancel()
			if gerr != nil {
				return false, 0, gerr
			}
			if len(gr.Kvs) == 0 {
				return true, 0, nil
			}
			return false, gr.Header.Revision, nil
		}
	}
}

// revoke revokes a lease Start will not use, best effort and bounded even if
// ctx is already done.
func (k *Keeper) revoke(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.RequestTimeout)
	defer cancel()
	if _, err := k.c.Revoke(rctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		k.log.Warn().Err(err).Str("event", "revoke-failed").Str("lease", fmt.Sprintf("%x", int64(id))).
			Msg("lease: could not revoke an unused lease; it expires by itself")
	}
}
