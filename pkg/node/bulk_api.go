package node

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/drain"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// MaxRelocateMany bounds the objects of one RelocateMany.
const MaxRelocateMany = 4096

// bulksInFlight is how many bulk moves of one RelocateMany run at once.
const bulksInFlight = 4

// RelocateMany moves the actors names, hosted here, to one target as bulk
// moves of at most 128 objects each (bulk_source.go), and returns each
// one's outcome, in order. opts.Target names the target (empty: placement
// chooses one that hosts every type named); opts.Timeout bounds each
// relocation. A background RelocateMany (not opts.Foreground) first waits
// for the node's pacing, one unit per object, at most half its timeout
// (then ErrRelocationDeferred, nothing done). An object that cannot move
// in a bulk move (a group, a group's member, one not hosted here or
// relocating now; a pinned one with opts.SkipPinned) is refused alone
// (OutcomeRefused), the others go on. An
// error means nothing was done: invalid names or options
// (ErrInvalidRelocation), no target (ErrNoTarget), deferred.
func (n *Node) RelocateMany(ctx context.Context, names []string, opts RelocateOptions) ([]BulkOutcome, error) {
	if len(names) == 0 || len(names) > MaxRelocateMany {
		return nil, fmt.Errorf("%w: %d objects (1 to %d)", ErrInvalidRelocation, len(names), MaxRelocateMany)
	}
	if err := n.validRelocation(opts.Target, opts.Timeout); err != nil {
		return nil, err
	}
	if opts.Timeout == 0 {
		opts.Timeout = n.cfg.RelocationTimeout
	}
	var types []string
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		obj, err := keyspace.ParseObject(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidRelocation, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: %s named twice", ErrInvalidRelocation, name)
		}
		seen[name] = true
		if obj.Kind == keyspace.KindActor && !slices.Contains(types, obj.Type) {
			types = append(types, obj.Type)
		}
	}
	if !opts.Foreground {
		waited, err := n.pacing.Wait(ctx, float64(len(names)), opts.Timeout/2)
		if err != nil {
			return nil, fmt.Errorf("%w: %d objects (%.3g units/s now)", err, len(names), n.pacing.Rate())
		}
		opts.Timeout -= waited
	}
	target, err := n.pickTarget(ctx, opts.Target, types...)
	if err != nil {
		return nil, err
	}
	out := make([]BulkOutcome, len(names))
	sem := make(chan struct{}, bulksInFlight)
	var wg sync.WaitGroup
	for start := 0; start < len(names); start += drain.MaxBulk {
		end := min(start+drain.MaxBulk, len(names))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			copy(out[start:end], n.moveBulk(ctx, names[start:end], target, opts.Timeout, opts.SkipPinned))
		})
	}
	wg.Wait()
	return out, nil
}

// Proto is the outcome as AdminService.RelocateMany answers it.
func (o BulkOutcome) Proto() *pb.BulkOutcome {
	b := &pb.BulkOutcome{Object: o.Object, Outcome: o.Outcome, Code: o.Code, Message: o.Message}
	if o.ID != (wire.RelocationID{}) {
		b.RelocationId = o.ID[:]
	}
	return b
}

// RelocateMany (AdminService) moves hosted actors to one target as bulk
// moves (Node.RelocateMany; background work: the rebalancer's moves).
func (s *adminServer) RelocateMany(ctx context.Context, c *pb.RelocateManyCommand) (*pb.RelocateManyResult, error) {
	timeout, err := s.n.timeoutOfMs(c.GetTimeoutMs())
	if err != nil {
		return nil, wire.StatusError(err)
	}
	if c.GetTarget() == "" {
		return nil, wire.StatusError(fmt.Errorf("%w: RelocateMany names its target", ErrInvalidRelocation))
	}
	outs, err := s.n.RelocateMany(ctx, c.GetObjects(), RelocateOptions{Target: c.GetTarget(), Timeout: timeout, SkipPinned: c.GetSkipPinned(), Foreground: c.GetForeground()})
	if err != nil {
		return nil, wire.StatusError(err)
	}
	res := &pb.RelocateManyResult{Outcomes: make([]*pb.BulkOutcome, len(outs))}
	for i, o := range outs {
		res.Outcomes[i] = o.Proto()
	}
	return res, nil
}
