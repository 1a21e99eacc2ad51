// Package asleep owns a node's memory of the object names it has seen
// asleep: a set that never forgets a name it was given and answers yes, now
// and then, for a name it never was (about 4 in 100 at most). The location
// cache keeps nothing of a sleeping object, so a first call to a name the
// cache does not hold is for a new object or a sleeping one; this set tells
// which to expect in a few bits per name (docs/developing/lifecycle.md).
package asleep

import "github.com/bits-and-blooms/bloom/v3"

// Set is a scalable Bloom filter: a list of filters, each twice the names
// of the one before at half its false-positive rate, so that the rates sum
// to under twice the first's however many names come. Not safe for
// concurrent use: the cache calls Add under its write lock and Maybe under
// its read lock.
type Set struct {
	filters  []*bloom.BloomFilter
	n, limit uint // names in the newest filter; its capacity
	names    uint // names added in all
}

const (
	firstNames = 1 << 16 // about 80 KiB
	firstRate  = 0.02
)

// Add remembers name.
func (s *Set) Add(name string) {
	if s.Maybe(name) {
		return
	}
	if len(s.filters) == 0 || s.n >= s.limit {
		k := len(s.filters)
		s.limit = firstNames << k
		s.filters = append(s.filters, bloom.NewWithEstimates(s.limit, firstRate/float64(uint(1)<<k)))
		s.n = 0
	}
	s.filters[len(s.filters)-1].AddString(name)
	s.n++
	s.names++
}

// Maybe reports whether name may have been added: false only for a name
// that never was.
func (s *Set) Maybe(name string) bool {
	for _, f := range s.filters {
		if f.TestString(name) {
			return true
		}
	}
	return false
}

// Names is how many names were added (a name that tested present when
// added counts once, or not at all if it never was).
func (s *Set) Names() uint { return s.names }

// Bytes is the memory the filters hold.
func (s *Set) Bytes() uint {
	var b uint
	for _, f := range s.filters {
		b += f.Cap() / 8
	}
	return b
}
