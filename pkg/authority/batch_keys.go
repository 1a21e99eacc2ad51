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
	return less(s.start, o.upper()) && less(o.start, s.upper())
}

// upper is the end of s as an exclusive bound; nil: unbounded.
func (s keySpan) upper() []byte {
	switch {
	case s.end == nil:
		return append(bytes.Clone(s.start), 0) // start alone
	case len(s.end) == 1 && s.end[0] == 0:
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

// meets reports whether w writes a key one of batch's writes reads or
// writes, or reads a key one of them writes.
func (w *batchWrite) meets(batch []*batchWrite) bool {
	wr, ww := w.spans()
	for _, x := range batch {
		xr, xw := x.spans()
		if anyMeet(ww, xr) || anyMeet(ww, xw) || anyMeet(wr, xw) {
			return true
		}
	}
	return false
}

func anyMeet(a, b []keySpan) bool {
	for _, x := range a {
		for _, y := range b {
			if x.meets(y) {
				return true
			}
		}
	}
	return false
}
