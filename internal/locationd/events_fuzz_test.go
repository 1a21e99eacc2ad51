package locationd

import (
	"errors"
	"testing"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// FuzzEventsQuery: GET /v1/events's query and Last-Event-ID never panic;
// what is refused is errInvalidArgument; what is accepted names known
// types, a canonical object, and an id that formats back to itself.
func FuzzEventsQuery(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"types=owner,record", ""}, {"object=actor/counter/c1&types=record", ""},
		{"types=bogus", ""}, {"object=../x", ""}, {"", "0123456789abcdef-42"}, {"lastEventId=0123456789abcdef-7", ""},
		{"", "0123456789abcdef-0"}, {"types=owner&types=owner", ""}, {"%zz", ""}, {"", "x-1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, q, id string) {
		flt, err := parseEventsQuery(q, id)
		if err != nil {
			if !errors.Is(err, errInvalidArgument) {
				t.Fatalf("%q %q: %v is not invalid_argument", q, id, err)
			}
			return
		}
		for typ := range flt.types {
			if !contains(filterableEvents, typ) {
				t.Fatalf("accepted type %q", typ)
			}
		}
		if flt.object != "" {
			o, err := keyspace.ParseObject(flt.object)
			if err != nil || o.String() != flt.object {
				t.Fatalf("accepted object %q: %v", flt.object, err)
			}
		}
		if flt.epoch != "" {
			h := &eventHub{epoch: flt.epoch}
			if e, n, err := parseEventID(h.id(flt.after)); err != nil || e != flt.epoch || n != flt.after {
				t.Fatalf("id %q: round trip %q %d %v", id, e, n, err)
			}
		}
	})
}
