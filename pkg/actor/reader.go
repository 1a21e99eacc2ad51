package actor

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// reader reads a binary state; the first error sticks. It moves an offset
// rather than reslicing b: an int store through the pointer needs no
// write barrier, and a decoder calls these once per field.
type reader struct {
	b   []byte
	off int
	err error
}

// left is how many bytes are still to read.
func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad %s", what)
		return 0
	}
	if n != uvarintLen(v) {
		// A longer form than the shortest is another encoding of the same
		// state: refused, so every state has one encoding.
		r.fail("%s: %d-byte varint, not canonical", what, n)
		return 0
	}
	r.off += n
	return v
}

// uvarintLen is the length of v's shortest (canonical) uvarint.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad %s", what)
		return 0
	}
	if n != uvarintLen(uint64(v)<<1^uint64(v>>63)) { // zig-zag, as binary.PutVarint
		r.fail("%s: %d-byte varint, not canonical", what, n)
		return 0
	}
	r.off += n
	return v
}

func (r *reader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if r.left() < 1 {
		r.fail("truncated %s", what)
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

// bytes returns the next n bytes (a sub-slice of the input: never an
// allocation larger than the input).
func (r *reader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(r.left()) {
		r.fail("truncated %s: %d bytes, %d left", what, n, r.left())
		return nil
	}
	s := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return s
}

func (r *reader) end() error {
	if r.err == nil && r.left() != 0 {
		r.fail("%d trailing bytes", r.left())
	}
	return r.err
}
