package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node/drain"
	"github.com/meshloc/meshloc/pkg/placement"
)

// The node as its drain sees it (pkg/node/drain decides; this carries out).

// drainHost is the node a drain runs on.
type drainHost struct{ n *Node }

func (d drainHost) Hosted() int { return d.n.Hosted() }

// Undone lists the hosted objects not in done, by name: one pass over the
// hosted objects.
func (d drainHost) Undone(done map[drain.Hosted]bool) []drain.Hosted {
	n := d.n
	n.mu.Lock()
	hs := make([]drain.Hosted, 0, len(n.objects)-min(len(done), len(n.objects)))
	for _, h := range n.objects {
		if !done[h] {
			hs = append(hs, h)
		}
	}
	n.mu.Unlock()
	slices.SortFunc(hs, func(a, b drain.Hosted) int { return strings.Compare(a.Name(), b.Name()) })
	return hs
}

func (d drainHost) Current(name string) drain.Hosted {
	if h := d.n.hostedObject(name); h != nil {
		return h
	}
	return nil // not a typed nil: the drain compares it
}

func (d drainHost) IsHosted(name string) bool                 { return d.n.isHosted(name) }
func (d drainHost) HostedChanged() <-chan struct{}            { return d.n.hostedChanged() }
func (d drainHost) DirectoryChanged() <-chan struct{}         { return d.n.dir.Changed() }
func (d drainHost) Stopping() <-chan struct{}                 { return d.n.stopping }
func (d drainHost) TargetStages() int                         { return d.n.targetStages() }
func (d drainHost) Count(ownerID string) int                  { return d.n.cache.Count(ownerID) }
func (d drainHost) Step() error                               { return drainStep() }
func (d drainHost) Targets(typ string) ([]lease.Owner, error) { return d.n.targets(d.n.need(typ), "") }

func (d drainHost) Takes(target lease.Owner, typ string) bool {
	return placement.Ineligible(target.Candidate(), d.n.need(typ)) == ""
}

func (d drainHost) MoveOne(ctx context.Context, name, target string, timeout time.Duration) drain.MoveResult {
	st, err := d.n.Relocate(ctx, name, RelocateOptions{Target: target, Timeout: timeout, Foreground: true})
	return drain.MoveResult{Status: st, Err: err, Busy: errors.Is(err, ErrAlreadyRelocating),
		NotHosted: errors.Is(err, ErrNotHosted), NoTarget: errors.Is(err, ErrNoTarget)}
}

func (d drainHost) MoveBulk(ctx context.Context, names []string, target lease.Owner, timeout time.Duration) []drain.BulkResult {
	outs := d.n.moveBulk(ctx, names, target, timeout, false)
	res := make([]drain.BulkResult, len(outs))
	for i, o := range outs {
		res[i] = drain.BulkResult{Object: o.Object, ID: o.ID, Outcome: o.Outcome, Code: o.Code, Message: o.Message,
			Interruption: o.Interruption, Alone: o.Alone}
	}
	return res
}

// targetStages counts the relocations in flight with this node as target.
func (n *Node) targetStages() int { return n.relocs.InFlight("target") }

// isHosted reports whether an object of this name is hosted here.
func (n *Node) isHosted(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.objects[name]
	return ok
}
