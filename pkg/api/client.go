package api

import (
	"fmt"
	"net/url"
)

// MaxBody bounds how much of an answer the Client reads (bytes).
const MaxBody = 64 << 20

// JSONContentType is the media type of every request body locationd takes:
// a POST with a non-empty body of another type is refused with
// CodeUnsupportedMediaType (415). The Client sends it with every POST.
const JSONContentType = "application/json"

// ObjectsQuery filters Objects. Zero fields do not filter.
type ObjectsQuery struct {
	Kind  string // "actor" or "group"
	Owner string // an owner id
	// Orphaned nil: all; true: only objects whose owner is gone; false: only
	// objects whose owner is alive.
	Orphaned *bool
	// Contains keeps the objects whose name contains it (1 to MaxContains
	// bytes).
	Contains string
	// Limit, if not 0, asks for one page of at most Limit objects
	// (1..MaxObjectsLimit), after After (an object name; "": from the
	// start), read at Revision (0: now; the next pages of a listing give
	// the first page's, so that the listing is of one revision). The
	// answer's Next is the After of the next page. A page may hold fewer
	// objects than Limit and still have a Next: one request reads at most
	// 100,000 records. A revision etcd compacted meanwhile is a conflict:
	// list again from the start.
	Limit    int
	After    string
	Revision int64
}

// Bounds of ObjectsQuery.
const (
	MaxContains     = 256
	MaxObjectsLimit = 10_000
)

// Values is the query string of q.
func (q ObjectsQuery) Values() url.Values {
	v := url.Values{}
	if q.Kind != "" {
		v.Set("kind", q.Kind)
	}
	if q.Owner != "" {
		v.Set("owner", q.Owner)
	}
	if q.Orphaned != nil {
		v.Set("orphaned", fmt.Sprint(*q.Orphaned))
	}
	if q.Contains != "" {
		v.Set("contains", q.Contains)
	}
	if q.Limit != 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Revision != 0 {
		v.Set("revision", fmt.Sprint(q.Revision))
	}
	return v
}

// RelocationsQuery filters Relocations. Zero fields do not filter.
type RelocationsQuery struct {
	// Object keeps the relocations of this object.
	Object string
	// InFlight nil: all; true: only relocations in flight; false: only ended ones.
	InFlight *bool
}

// Values is the query string of q.
func (q RelocationsQuery) Values() url.Values {
	v := url.Values{}
	if q.Object != "" {
		v.Set("object", q.Object)
	}
	if q.InFlight != nil {
		v.Set("inflight", fmt.Sprint(*q.InFlight))
	}
	return v
}
