package routing

import (
	"sync"

	"github.com/meshloc/meshloc/internal/shrink"

	"github.com/meshloc/meshloc/pkg/authority"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Fences is what a gateway keeps of the newest fence seen per object: a
// reply carrying an older one comes from a superseded owner and is refused
// (docs/design.md §5). It holds the two generations Fence.Newer compares
// (16 bytes an object, not the whole fence's 40: one entry per object this
// node ever routed to).
type Fences struct {
	mu sync.Mutex
	m  map[string]fenceGens
	// peak of m: Retain rebuilds it once it holds a quarter of that.
	peak shrink.Peak
	// acceptOlder is a test build's planted bug (no-generation-check): an
	// older fence is accepted, the newest kept. Nil: refused.
	acceptOlder func() bool
}

type fenceGens struct{ obj, owner int64 }

func (g fenceGens) newer(f fenceGens) bool {
	return authority.Fence{ObjectGeneration: g.obj, AuthorityGeneration: g.owner}.Newer(authority.Fence{ObjectGeneration: f.obj, AuthorityGeneration: f.owner})
}

// NewFences makes an empty table. acceptOlder, when set, answers for an
// older fence instead of refusing it (a test build's seam; nil in
// production).
func NewFences(acceptOlder func() bool) *Fences {
	return &Fences{m: map[string]fenceGens{}, acceptOlder: acceptOlder}
}

// Accept records wf for object name if it is not older than the newest
// fence seen for it, and refuses it otherwise.
func (t *Fences) Accept(name string, wf *pb.Fence) bool {
	f := fenceGens{obj: wf.GetObjectGeneration(), owner: wf.GetAuthorityGeneration()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.m[name]; ok && cur.newer(f) {
		return t.acceptOlder != nil && t.acceptOlder()
	}
	t.m[name] = f
	t.peak.Grew(len(t.m))
	return true
}

// Newest is the newest fence seen for object name, its two generations.
func (t *Fences) Newest(name string) (authority.Fence, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.m[name]
	return authority.Fence{ObjectGeneration: f.obj, AuthorityGeneration: f.owner}, ok
}

// Retain keeps the fences of the objects keep says to, and forgets the
// others. A node forgets those of objects its location cache holds no
// entry of, asleep (pkg/authority Cache): otherwise the table would keep
// one entry per object ever routed, however many of them sleep. A reply
// under a fence older than a forgotten one is then refused only by the
// checks that stand without the table: an owner serves only while it can
// confirm its lease, and an owner's reply is accepted only while this
// gateway's cache is known fresh.
func (t *Fences) Retain(keep func(name string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name := range t.m {
		if !keep(name) {
			delete(t.m, name)
		}
	}
	t.m = shrink.Deleted(t.m, &t.peak)
}

// Len is the number of objects whose fence the table holds.
func (t *Fences) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
