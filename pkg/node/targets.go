package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/placement"
)

// Where an object may go from this node: placement.Eligible, the one rule,
// applied to the owner directory.

// directoryWait bounds how long a node waits for the owner directory to
// change when it found no target: a descriptor update may be in flight.
const directoryWait = time.Second

// need is what an object of types moving away from this node asks of its
// target: every type, this node's application version, another owner.
func (n *Node) need(types ...string) placement.Need {
	slices.Sort(types)
	return placement.Need{Types: slices.Compact(types), Version: n.cfg.ApplicationVersion, From: n.self.ID}
}

// targets are the live owners eligible for need; want, when set, admits
// only that owner id. None is ErrNoTarget, saying why.
func (n *Node) targets(need placement.Need, want string) ([]lease.Owner, error) {
	var out []lease.Owner
	why := ""
	for _, o := range n.dir.List() {
		if want != "" && o.Descriptor.OwnerID != want {
			continue
		}
		if r := placement.Ineligible(o.Candidate(), need); r != "" {
			why = r
			continue
		}
		out = append(out, o)
	}
	switch {
	case len(out) > 0:
		return out, nil
	case want != "" && why == "":
		return nil, fmt.Errorf("%w: %s is not a live owner", ErrNoTarget, want)
	case want != "":
		return nil, fmt.Errorf("%w: %s", ErrNoTarget, why)
	}
	return nil, fmt.Errorf("%w: no other live serving node with weight > 0 and application version %q hosts %v", ErrNoTarget, need.Version, need.Types)
}

// pickTarget chooses the target of a relocation of objects of types: the
// owner want names, or a choice among the eligible weighted by their
// placement weight. With none eligible it looks once more after the
// directory's next change (at most directoryWait).
func (n *Node) pickTarget(ctx context.Context, want string, types ...string) (lease.Owner, error) {
	need := n.need(types...)
	cands, err := n.targets(need, want)
	if errors.Is(err, ErrNoTarget) {
		n.awaitDirectory(ctx, directoryWait)
		cands, err = n.targets(need, want)
	}
	if err != nil {
		return lease.Owner{}, err
	}
	total := 0
	for _, c := range cands {
		total += c.Descriptor.Weight
	}
	x := rand.IntN(total)
	for _, c := range cands {
		if x -= c.Descriptor.Weight; x < 0 {
			return c, nil
		}
	}
	return cands[len(cands)-1], nil
}

// awaitDirectory returns at the owner directory's next change, after d, or
// when ctx ends.
func (n *Node) awaitDirectory(ctx context.Context, d time.Duration) {
	t := n.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.dir.Changed():
	case <-t.C():
	case <-ctx.Done():
	}
}

// joinTarget is the live owner of the group gs, if it may take actor (an
// Actor Join moves the actor to the group's owner, nowhere else).
func (n *Node) joinTarget(gs authority.Snapshot, actor keyspace.Object) (lease.Owner, error) {
	o := gs.Record.Owner
	c, ok := n.dir.Lookup(o.ID)
	if !ok || c.Generation != o.Generation {
		return lease.Owner{}, fmt.Errorf("%w: %s, the owner of %s, is not alive", ErrNoTarget, o, gs.Object)
	}
	if why := placement.Ineligible(c.Candidate(), n.need(actor.Type)); why != "" {
		return lease.Owner{}, fmt.Errorf("%w: %s, the owner of %s: %s", ErrNoTarget, o, gs.Object, why)
	}
	return c, nil
}
