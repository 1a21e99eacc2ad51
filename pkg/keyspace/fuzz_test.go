package keyspace

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseObject: ParseObject never panics and refuses with
// ErrInvalidName; an accepted name is canonical (String gives it back),
// its Object validates, parses again to itself, and makes keys that
// parse back to it (ParseAuthority).
//
//	go test -run '^$' -fuzz '^FuzzParseObject$' -fuzztime 1m ./pkg/keyspace/
func FuzzParseObject(f *testing.F) {
	for _, s := range []string{
		"actor/counter/c1", "group/g-1", "actor/bank/acct:7@eu", "actor/dcounter/A.b_c-d", "",
		"actor", "actor/counter", "actor//x", "group/a/b", "thing/x", "actor/c/ x", "actor/c/..",
		"actor/c/a\x00b", "group/.", "actor/" + strings.Repeat("t", MaxSegment) + "/x", "actor/t/" + strings.Repeat("i", MaxSegment+1),
		"ACTOR/c/x", "group//", "actor/c/x/", "/actor/c/x", "actor/c/\u00e9",
	} {
		f.Add(s)
	}
	keys := Default()
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseObject(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("%q: untyped error %v", s, err)
			}
			if !o.IsZero() {
				t.Fatalf("%q: refused but returned %+v", s, o)
			}
			return
		}
		if o.String() != s {
			t.Fatalf("%q parsed as %+v, which prints as %q", s, o, o.String())
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("%q parsed as %+v, which does not validate: %v", s, o, err)
		}
		if o.Kind != KindActor && o.Kind != KindGroup || (o.Kind == KindGroup) != (o.Type == "") {
			t.Fatalf("%q parsed as %+v", s, o)
		}
		if again, err := ParseObject(o.String()); err != nil || again != o {
			t.Fatalf("%q → %+v → %+v %v", s, o, again, err)
		}
		if back, err := keys.ParseAuthority(keys.Authority(o)); err != nil || back != o {
			t.Fatalf("%q: authority key %q parses as %+v %v", s, keys.Authority(o), back, err)
		}
	})
}
