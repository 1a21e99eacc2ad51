// Package shrink gives back the memory of Go maps that emptied. A Go map
// keeps the buckets of the most entries it ever held: a node that hosted
// 100,000 objects and put them all to sleep would keep a 100,000-entry
// table for each of its per-object maps, forever. The owner of such a map
// calls Deleted after removing entries; once the map holds under a
// quarter of the most it held, Deleted returns a copy sized for what is
// left and the old table becomes garbage. Each entry is copied at most a
// bounded number of times per deletion (amortised O(1)).
package shrink

// Min is the smallest peak worth a rebuild: below it the table is small.
const Min = 1024

// Peak is the most entries a map held when it was last looked at (by
// Deleted) since it was last rebuilt. Its zero value is ready.
type Peak struct{ n int }

// Grew notes that the map holds n entries (after an insert): needed only by
// an owner that removes many entries before calling Deleted once.
func (p *Peak) Grew(n int) { p.n = max(p.n, n) }

// Deleted is called after entries were removed from m: after each removal,
// or after many when Grew noted the inserts. It returns m, or a copy of m
// sized for its entries when m holds under a quarter of its peak of at
// least Min entries.
func Deleted[K comparable, V any](m map[K]V, p *Peak) map[K]V {
	n := len(m)
	p.n = max(p.n, n+1)
	if p.n < Min || n >= p.n/4 {
		return m
	}
	c := make(map[K]V, n)
	for k, v := range m {
		c[k] = v
	}
	p.n = n
	return c
}
