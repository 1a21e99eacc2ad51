package verify

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// bulk puts relocations/<id>: a bulk intent moving obj, at store version
// from, to target as relocation rid.
func (p *replay) bulk(id, obj string, from int64, rid string, src, target record.OwnerRef) {
	p.rev++
	b := record.BulkIntent{Kind: record.BulkIntentKind, Source: src, Target: target, TargetNode: record.NodeRef{Address: "127.0.0.1:2"}, DeadlineMs: 1,
		Units: []record.BulkUnit{{Object: keyspace.Actor("register", obj).String(), RelocationID: rid, NonceHash: record.HashNonce(nil), StoreVersion: from}}}
	p.r.Apply(AuditEvent{Revision: p.rev, Key: akeys.Relocation(id), Value: b.Encode(), CreateRevision: p.rev, ModRevision: p.rev})
}

func (p *replay) bulkGone(id string) {
	p.rev++
	p.r.Apply(AuditEvent{Revision: p.rev, Key: akeys.Relocation(id), Delete: true, ModRevision: p.rev})
}

// TestAuditBulkCommits: under the one-write rule a commit from a record
// without an intent is right when a bulk intent etcd holds names the
// object at the version it went from, the commit's target and relocation;
// any other is a violation.
func TestAuditBulkCommits(t *testing.T) {
	for _, c := range []struct {
		name string
		// from, rid, target override the bulk intent's (0, "": the commit's)
		fromDelta int64
		rid       string
		toN3      bool
		gone      bool
		want      string
	}{
		{name: "right"},
		{name: "another version", fromDelta: -1, want: "commit"},
		{name: "another relocation", rid: "rel-9", want: "commit"},
		{name: "another target", toN3: true, want: "commit"},
		{name: "the key deleted first", gone: true, want: "commit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newReplay()
			n1, n2, n3 := p.owner("n1"), p.owner("n2"), p.owner("n3")
			p.put("x", rec(n1, 1, 1))
			from := p.rev
			rid, target := "rel-1", n2
			if c.rid != "" {
				rid = c.rid
			}
			if c.toN3 {
				target = n3
			}
			p.bulk("b1", "x", from+c.fromDelta, rid, n1, target)
			if c.gone {
				p.bulkGone("b1")
			}
			r := rec(n2, 1, 2)
			r.LastRelocation = "rel-1"
			p.put("x", r)
			vs := p.r.Result().Violations
			if c.want == "" {
				if len(vs) != 0 {
					t.Fatalf("violations: %+v", vs)
				}
				return
			}
			wantViolation(t, vs, c.want)
		})
	}
}
