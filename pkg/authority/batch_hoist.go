package authority

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Hoisting: a compare that every write of a batch carries (a bulk's
// commits all compare their target's owner key, and those of one bulk its
// fence) is evaluated once, by the outer transaction, instead of once per
// write. The batch's writes touch no key another of them writes
// (batch_keys.go), so such a compare has one result for all of them: where
// it holds, each write's own transaction runs as it would have; where it
// fails, the outer transaction applies nothing and the batch goes again
// without hoisting, each write then deciding on its own compares, later,
// as if it had waited for the next batch.

// hoist returns the compares every write of batch carries, and each write's
// others. With none shared, rest is nil.
func hoist(batch []*batchWrite) (shared []clientv3.Cmp, rest [][]clientv3.Cmp) {
	if len(batch) < 2 {
		return nil, nil
	}
	first := batch[0].cmps
	in := make([]bool, len(first))
	for i := range first {
		in[i] = true
		for _, w := range batch[1:] {
			if !carries(w.cmps, &first[i]) {
				in[i] = false
				break
			}
		}
		if in[i] {
			shared = append(shared, first[i])
		}
	}
	if len(shared) == 0 {
		return nil, nil
	}
	rest = make([][]clientv3.Cmp, len(batch))
	for i, w := range batch {
		rest[i] = make([]clientv3.Cmp, 0, len(w.cmps)-len(shared))
		for j := range w.cmps {
			if !carries(shared, &w.cmps[j]) {
				rest[i] = append(rest[i], w.cmps[j])
			}
		}
	}
	return shared, rest
}

// carries reports whether cs holds a compare equal to c.
func carries(cs []clientv3.Cmp, c *clientv3.Cmp) bool {
	for i := range cs {
		if sameCmp(cs[i].GetCompare(), c.GetCompare()) {
			return true
		}
	}
	return false
}

func sameCmp(a, b *pb.Compare) bool {
	return a.Result == b.Result && a.Target == b.Target &&
		bytes.Equal(a.Key, b.Key) && bytes.Equal(a.RangeEnd, b.RangeEnd) &&
		a.GetVersion() == b.GetVersion() && a.GetCreateRevision() == b.GetCreateRevision() &&
		a.GetModRevision() == b.GetModRevision() && a.GetLease() == b.GetLease() &&
		bytes.Equal(a.GetValue(), b.GetValue())
}
