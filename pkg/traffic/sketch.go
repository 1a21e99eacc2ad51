package traffic

import (
	"cmp"
	"container/heap"
	"slices"
)

// Edge is one edge of the sketch.
type Edge struct {
	From, To string
	// Count is the (decayed) number of messages counted on the edge; it
	// overestimates the true count by at most Err.
	Count uint64
	Err   uint64
}

// DefaultCapacity is the edges a node keeps unless configured otherwise.
const DefaultCapacity = 4096

// MaxCapacity bounds a sketch.
const MaxCapacity = 1 << 20

type key struct{ from, to string }

type entry struct {
	key
	count, err uint64
	at         int // index in the heap
}

// minHeap orders the entries by count, smallest first: the one Space-Saving
// replaces when a new edge comes and the sketch is full.
type minHeap []*entry

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].at = i; h[j].at = j }
func (h *minHeap) Push(x any)        { e := x.(*entry); e.at = len(*h); *h = append(*h, e) }
func (h *minHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// Sketch is a bounded summary of the heaviest edges.
type Sketch struct {
	capacity int
	halfLife int64 // ms; 0: counts never fade
	decayed  int64 // Unix ms of the last halving
	started  bool  // decayed is set
	byKey    map[key]*entry
	h        minHeap
	total    uint64
	cross    uint64
}

// New returns a sketch of at most capacity edges (≤ 0: DefaultCapacity)
// whose counts halve every halfLifeMs milliseconds (≤ 0: never).
func New(capacity int, halfLifeMs int64) *Sketch {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Sketch{capacity: min(capacity, MaxCapacity), halfLife: max(halfLifeMs, 0), byKey: map[key]*entry{}}
}

// Capacity is the most edges the sketch keeps.
func (s *Sketch) Capacity() int { return s.capacity }

// Len is the number of edges kept.
func (s *Sketch) Len() int { return len(s.h) }

// Observe counts n messages from → to at nowMs; cross says the destination
// was served by another node than the sender.
func (s *Sketch) Observe(nowMs int64, from, to string, n uint64, cross bool) {
	if n == 0 {
		return
	}
	s.age(nowMs)
	s.total += n
	if cross {
		s.cross += n
	}
	k := key{from, to}
	if e, ok := s.byKey[k]; ok {
		e.count += n
		heap.Fix(&s.h, e.at)
		return
	}
	if len(s.h) < s.capacity {
		e := &entry{key: k, count: n}
		s.byKey[k] = e
		heap.Push(&s.h, e)
		return
	}
	// Space-Saving: the new edge takes the place of the lightest, with its
	// count (an upper bound of what the new edge may have had) as error.
	e := s.h[0]
	delete(s.byKey, e.key)
	e.key, e.err, e.count = k, e.count, e.count+n
	s.byKey[k] = e
	heap.Fix(&s.h, 0)
}

// age halves every count once per half-life passed since the last halving.
func (s *Sketch) age(nowMs int64) {
	if s.halfLife == 0 {
		return
	}
	if !s.started || nowMs < s.decayed {
		s.decayed, s.started = nowMs, true // the first observation, or a clock that went back
		return
	}
	k := (nowMs - s.decayed) / s.halfLife
	if k == 0 {
		return
	}
	s.decayed += k * s.halfLife
	shift := min(k, 63)
	s.total >>= shift
	s.cross >>= shift
	kept := s.h[:0]
	for _, e := range s.h {
		e.count >>= shift
		e.err >>= shift
		if e.count == 0 {
			delete(s.byKey, e.key)
			continue
		}
		kept = append(kept, e)
	}
	clear(s.h[len(kept):])
	s.h = kept
	for i, e := range s.h {
		e.at = i
	}
	heap.Init(&s.h)
}

// Top returns up to limit edges (≤ 0: all), heaviest first (ties: by from,
// then to), as of nowMs.
func (s *Sketch) Top(nowMs int64, limit int) []Edge {
	s.age(nowMs)
	out := make([]Edge, 0, len(s.h))
	for _, e := range s.h {
		out = append(out, Edge{From: e.from, To: e.to, Count: e.count, Err: e.err})
	}
	slices.SortFunc(out, func(a, b Edge) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		if c := cmp.Compare(a.From, b.From); c != 0 {
			return c
		}
		return cmp.Compare(a.To, b.To)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Totals are the (decayed) messages counted and those that crossed nodes,
// as of nowMs.
func (s *Sketch) Totals(nowMs int64) (messages, cross uint64) {
	s.age(nowMs)
	return s.total, s.cross
}
