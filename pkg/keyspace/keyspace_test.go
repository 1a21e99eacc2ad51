package keyspace

import (
	"errors"
	"testing"
)

func TestParseObject(t *testing.T) {
	good := []string{"actor/counter/c1", "group/g-1", "actor/bank/acct:7@eu"}
	for _, s := range good {
		o, err := ParseObject(s)
		if err != nil || o.String() != s {
			t.Errorf("%q: %v %q", s, err, o)
		}
	}
	bad := []string{"", "actor", "actor/counter", "actor//x", "group/a/b", "thing/x", "actor/c/ x", "actor/c/..", "actor/c/a\x00b"}
	for _, s := range bad {
		if _, err := ParseObject(s); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q: err = %v, want ErrInvalidName", s, err)
		}
	}
}

func TestKeys(t *testing.T) {
	k := MustNew("/meshloc", "default")
	o := Actor("counter", "c1")
	if got := k.Authority(o); got != "/meshloc/default/authority/actor/counter/c1" {
		t.Fatal(got)
	}
	back, err := k.ParseAuthority(k.Authority(o))
	if err != nil || back != o {
		t.Fatal(back, err)
	}
	if id, err := k.ParseOwner(k.Owner("n1")); err != nil || id != "n1" {
		t.Fatal(id, err)
	}
	if _, err := k.ParseOwner("/meshloc/other/owners/n1"); err == nil {
		t.Fatal("foreign key parsed")
	}
	if _, err := New("meshloc", "default"); err == nil {
		t.Fatal("relative prefix accepted")
	}
	if _, err := New("/m", "a/b"); err == nil {
		t.Fatal("cluster with slash accepted")
	}
}
