package authority

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RecoverMany is Recover of many orphans at once (locationd's recovery
// controller, docs/design.md §3 "recover"). Each keeps its own transaction
// — its own compares (its record's store version, its catalog entry, the
// old owner gone, the new owner alive, the guard) and its own outcome — and
// their transactions share etcd requests as nested transactions, as many
// per request as etcd's limits allow (the batcher of a Batched store, with
// its limits; etcd's defaults otherwise): one whose compare fails is not
// applied, and its batch-mates are, exactly as if each had gone alone. The
// catalog entries of the actors are read the same way, many per request.
//
// results[i] and errs[i] are reqs[i]'s, as Recover would answer it: an
// invalid request gets its error and nothing is written for it; an etcd
// error is resolved by reading back, per request (Resolved). A group, or a
// group's member, is recovered with its whole group in its one transaction,
// which shares a request only when it fits beside others. Two requests that
// write the same record (two members of one group, or a group and a member)
// make etcd refuse their batch, which then goes one transaction at a time:
// pass each group once.
func (s *Store) RecoverMany(ctx context.Context, reqs []RecoverRequest) (results []WriteResult, errs []error) {
	return s.recoverMany(ctx, reqs, false)
}

// recoverMany is RecoverMany; shareCompare is the planted bug
// recovery-batch-shared-compare (a test build's RecoverManySharedCompare):
// an actor's transaction after the first of its request does not compare
// its own record.
func (s *Store) recoverMany(ctx context.Context, reqs []RecoverRequest, shareCompare bool) ([]WriteResult, []error) {
	results, errs := make([]WriteResult, len(reqs)), make([]error, len(reqs))
	b := s.batch
	if b == nil {
		b = &batcher{kv: s.c, limits: DefaultLimits()}
	}
	var single []int // indexes of the actors outside groups
	for i, req := range reqs {
		if errs[i] = req.validate(); errs[i] == nil && !req.grouped() {
			single = append(single, i)
		}
	}
	cats, err := s.readCatalogs(ctx, reqs, single, b.limits.MaxTxnOps)
	if err != nil {
		for _, i := range single {
			errs[i] = err
		}
		single = nil
	}
	plans := make([]recoverPlan, len(reqs))
	planned := make([]bool, len(reqs))
	for _, i := range single {
		plans[i], planned[i] = s.planRecovery(reqs[i], cats[i]), true
	}
	var wg sync.WaitGroup // groups: each group's records are read, a few groups at a time
	sem := make(chan struct{}, readsInFlight)
	for i, req := range reqs {
		if errs[i] != nil || !req.grouped() {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p, err := s.planGroupRecovery(ctx, req)
			switch {
			case err != nil:
				errs[i] = err
			case p.decided:
				results[i] = p.res
			default:
				plans[i], planned[i] = p, true
			}
		})
	}
	wg.Wait()
	if shareCompare && len(single) > 1 {
		// The planted bug: in runs of as many as one request carries,
		// the actors' transactions after the first leave their record's
		// compare out, as if the first one's guarded the run (in its
		// place, a second copy of their old owner key's compare: a batch
		// never holds a write that reads a key another writes, so a
		// compare of the first's record would only delay them).
		per := max(1, b.limits.MaxTxnOps-len(plans[single[0]].txn.cmps))
		for j, i := range single {
			if j%per != 0 {
				plans[i].txn.cmps[0] = plans[i].txn.cmps[1]
			}
		}
	}

	var idx []int
	var txns []pendingTxn
	for i := range reqs {
		if planned[i] {
			idx = append(idx, i)
			txns = append(txns, plans[i].txn)
		}
	}
	end := traceMany(ctx, "recover", len(txns))
	rs := b.doMany(ctx, txns)
	end(rs)
	for j, r := range rs {
		i := idx[j]
		if errors.Is(r.err, errNotSent) {
			errs[i] = fmt.Errorf("authority: recover %s: %w", plans[i].obj, r.err) // nothing written
			continue
		}
		results[i], errs[i] = s.recovered(ctx, plans[i], r.resp, r.err)
	}
	return results, errs
}

// readCatalogs reads the catalog entries of reqs[idx...] with gets shared
// by transactions of at most maxOps operations, several in flight.
func (s *Store) readCatalogs(ctx context.Context, reqs []RecoverRequest, idx []int, maxOps int) (map[int]catalogSeen, error) {
	out := make(map[int]catalogSeen, len(idx))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, readsInFlight)
	var first error
	for start := 0; start < len(idx); start += maxOps {
		part := idx[start:min(start+maxOps, len(idx))]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ops := make([]clientv3.Op, len(part))
			for j, i := range part {
				ops[j] = clientv3.OpGet(s.keys.Catalog(reqs[i].Seen.Object))
			}
			resp, err := s.c.Txn(ctx).Then(ops...).Commit()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("authority: recover: read catalogs: %w", err)
				}
				return
			}
			for j, i := range part {
				var c catalogSeen
				if kvs := resp.Responses[j].GetResponseRange().GetKvs(); len(kvs) > 0 {
					c = catalogSeen{rev: kvs[0].ModRevision, last: decodeCatalog(kvs[0].Value).LastObjectGeneration}
				}
				out[i] = c
			}
		})
	}
	wg.Wait()
	return out, first
}

// readsInFlight bounds the read transactions RecoverMany has in flight at
// once.
const readsInFlight = 4
