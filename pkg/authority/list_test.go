package authority_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// names of a listing's snapshots.
func names(snaps []authority.Snapshot) []string {
	out := make([]string, len(snaps))
	for i, s := range snaps {
		out[i] = s.Object.String()
	}
	return out
}

// pages reads a whole listing page by page, at the first page's revision.
func pages(t *testing.T, s *authority.Store, opt authority.ListOptions, between func(int)) ([]string, int) {
	t.Helper()
	var all []string
	n := 0
	for {
		p, err := s.ListPage(context.Background(), opt)
		if err != nil {
			t.Fatal(err)
		}
		if opt.Limit > 0 && len(p.Snapshots) > opt.Limit {
			t.Fatalf("a page of %d, limit %d", len(p.Snapshots), opt.Limit)
		}
		if opt.Revision != 0 && p.Revision != opt.Revision {
			t.Fatalf("page at revision %d, asked %d", p.Revision, opt.Revision)
		}
		all = append(all, names(p.Snapshots)...)
		n++
		if between != nil {
			between(n)
		}
		if p.Next.IsZero() {
			return all, n
		}
		opt.After, opt.Revision = p.Next, p.Revision
	}
}

// ListPage: pages chained by Next at the first page's revision give what
// List gives, in name order, whatever the filters; a record written
// meanwhile is not in them; a page reads a bounded number of records; a
// compacted revision is ErrListCompacted.
func TestListPages(t *testing.T) {
	c, s := setup(t)
	n1, _ := owner(t, c, "n1", 30)
	n2, _ := owner(t, c, "n2", 30)
	ctx := context.Background()
	for i := range 23 {
		o := n1
		if i%3 == 0 {
			o = n2
		}
		activate(t, s, keyspace.Actor("counter", fmt.Sprintf("c%02d", i)), o)
	}
	activate(t, s, keyspace.Actor("list", "l1"), n1)
	activate(t, s, keyspace.Group("g1"), n1)
	for _, opt := range []authority.ListOptions{
		{}, {Kind: keyspace.KindActor}, {Kind: keyspace.KindGroup}, {Owner: "n2"}, {Contains: "c1"}, {Contains: "/l"},
		{Owner: "n1", Contains: "counter/c0"}, {Contains: "nothing"},
	} {
		want, _, err := s.List(ctx, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{0, 1, 4, 100} {
			opt.Limit = limit
			got, _ := pages(t, s, opt, nil)
			if !slices.Equal(got, names(want)) || !slices.IsSorted(got) {
				t.Errorf("%+v: pages %q, List %q", opt, got, names(want))
			}
		}
	}
	// Written after the first page: not in the listing, which is read at
	// the first page's revision.
	got, _ := pages(t, s, authority.ListOptions{Limit: 5}, func(n int) {
		if n == 1 {
			activate(t, s, keyspace.Actor("counter", "c99"), n1)
		}
	})
	if slices.Contains(got, "actor/counter/c99") || len(got) != 25 {
		t.Errorf("listing %q", got)
	}
	// After a name: strictly after it, also within a kind.
	p, err := s.ListPage(ctx, authority.ListOptions{After: keyspace.Actor("counter", "c21"), Limit: 2})
	if err != nil || fmt.Sprint(names(p.Snapshots)) != "[actor/counter/c22 actor/counter/c99]" || p.Next.IsZero() {
		t.Errorf("after c21: %q next %v: %v", names(p.Snapshots), p.Next, err)
	}
	p, err = s.ListPage(ctx, authority.ListOptions{Kind: keyspace.KindGroup, After: keyspace.Actor("list", "l1")})
	if err != nil || fmt.Sprint(names(p.Snapshots)) != "[group/g1]" || !p.Next.IsZero() {
		t.Errorf("groups after an actor: %q: %v", names(p.Snapshots), err)
	}
	// A page reads at most the scan bound: a filter that matches only the
	// last object takes pages that are empty but go on.
	restore := authority.SetListScanMax(7)
	got, n := pages(t, s, authority.ListOptions{Contains: "g1"}, nil)
	restore()
	if fmt.Sprint(got) != "[group/g1]" || n != 4 {
		t.Errorf("bounded scan: %q in %d pages, want group/g1 in 4 (26 records, 7 a page)", got, n)
	}
	// A compacted revision.
	p, err = s.ListPage(ctx, authority.ListOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	activate(t, s, keyspace.Actor("counter", "c98"), n1)
	cur, _ := c.Get(ctx, "x")
	if _, err := c.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatal(err)
	}
	_, err = s.ListPage(ctx, authority.ListOptions{Limit: 3, After: p.Next, Revision: p.Revision})
	if !errors.Is(err, authority.ErrListCompacted) || wire.CodeOf(err) != pb.Code_CODE_CONFLICT {
		t.Errorf("compacted: %v (code %v)", err, wire.CodeOf(err))
	}
	for _, bad := range []authority.ListOptions{{Limit: -1}, {Revision: -2}, {Kind: "thing"}} {
		if _, err := s.ListPage(ctx, bad); !errors.Is(err, authority.ErrInvalidRequest) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
