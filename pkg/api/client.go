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
}

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
