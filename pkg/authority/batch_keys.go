package authority

import (
	"bytes"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// No write of a batch may write a key another of its writes touches. etcd
// evaluates every compare of a transaction, nested ones included, against
// the state before any of its writes: two writes of one batch that compare
// the same record both pass, and both apply. etcd refuses two puts of one
// key in a batch, but not a put in one nested transaction and a delete of
// that key in a later one (seen: a relocation's intent and an owner's
// delete of the same record, both applied at one revision). So a write
// that writes a key another write of the batch reads or writes (compares,
// gets, puts, deletes; ranges included), or that reads a key another
// writes, waits for the next batch: each batch is then what its writes
// one after another would have been. Reads of one key by many writes (the
// owner key every relocation of a node compares) share a batch.

// keySpan is the keys [start, end) of a compare or an operation; end nil:
// start alone; end "\x00": every key from start on (etcd's convention).
type keySpan struct{ start, end []byte }

func (s keySpan) meets(o keySpan) bool {
	switch {
	case s.end == nil:
		return o.holds(s.start)
	case o.end == nil:
		return s.holds(o.start)
	}
	return less(s.start, o.bound()) && less(o.start, s.bound())
}

// holds reports whether key k is in s.
func (s keySpan) holds(k []byte) bool {
	if s.end == nil {
		return bytes.Equal(s.start, k)
	}
	return bytes.Compare(s.start, k) <= 0 && less(k, s.bound())
}

// bound is the exclusive end of a range; nil: unbounded.
func (s keySpan) bound() []byte {
	if len(s.end) == 1 && s.end[0] == 0 {
		return nil
	}
	return s.end
}

// less reports a < b, b nil being past every key.
func less(a, b []byte) bool { return b == nil || bytes.Compare(a, b) < 0 }

// spans are the keys w reads (compares, gets) and writes (puts,
// deletes; a nested transaction's counted as written).
func (w *batchWrite) spans() (reads, writes []keySpan) {
	if w.keys != nil {
		return w.keys[:w.nread], w.keys[w.nread:]
	}
	for i := range w.cmps {
		c := w.cmps[i].GetCompare()
		reads = append(reads, span(c.GetKey(), c.GetRangeEnd()))
	}
	for _, ops := range [][]clientv3.Op{w.thens, w.elses} {
		for _, op := range ops {
			if op.IsGet() {
				reads = append(reads, span(op.KeyBytes(), op.RangeBytes()))
			} else {
				writes = append(writes, span(op.KeyBytes(), op.RangeBytes()))
			}
		}
	}
	w.keys, w.nread = append(reads, writes...), len(reads)
	return w.keys[:w.nread], w.keys[w.nread:]
}

func span(key, end []byte) keySpan {
	if len(end) == 0 {
		end = nil
	}
	return keySpan{start: key, end: end}
}

// batchKeys are the keys a batch's writes read and write, indexed so that
// checking a queued write costs its own keys, not the batch's: a drain
// queues thousands of writes of a few keys each.
type batchKeys struct{ reads, writes keySet }

// keySet holds single keys by value and ranges (rare) in a list.
type keySet struct {
	points map[string]struct{}
	ranges []keySpan
}

func (k *keySet) add(s keySpan) {
	if s.end != nil {
		k.ranges = append(k.ranges, s)
		return
	}
	if k.points == nil {
		k.points = make(map[string]struct{})
	}
	k.points[string(s.start)] = struct{}{}
}

func (k *keySet) meets(s keySpan) bool {
	for _, r := range k.ranges {
		if r.meets(s) {
			return true
		}
	}
	if s.end == nil {
		_, ok := k.points[string(s.start)]
		return ok
	}
	for p := range k.points {
		if s.holds([]byte(p)) {
			return true
		}
	}
	return false
}

func (k *keySet) reset() {
	clear(k.points)
	k.ranges = k.ranges[:0]
}

// meets reports whether w writes a key the batch reads or writes, or
// reads a key it writes.
func (k *batchKeys) meets(w *batchWrite) bool {
	wr, ww := w.spans()
	for _, s := range ww {
		if k.reads.meets(s) || k.writes.meets(s) {
			return true
		}
	}
	for _, s := range wr {
		if k.writes.meets(s) {
			return true
		}
	}
	return false
}

// add takes w's keys into the batch's.
func (k *batchKeys) add(w *batchWrite) {
	wr, ww := w.spans()
	for _, s := range wr {
		k.reads.add(s)
	}
	for _, s := range ww {
		k.writes.add(s)
	}
}

func (k *batchKeys) reset() {
	k.reads.reset()
	k.writes.reset()
}
