package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/node/reloclog"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A background relocation the node's pacing holds back is a relocation
// already: it has its id, it is listed (ListRelocations, GET
// /v1/relocations) in the phase "pacing", its timeline starts with that
// step, and a detached one (RelocateOptions.Detach, "wait":false) is
// answered at once. Once admitted it goes on under the same id; if it is
// deferred, or what it needs is refused before its intent, it ends
// aborted (the object serves on where it was), listed with why.

// phasePacing is the phase, and the first timeline step, of a relocation
// waiting for the node's pacing.
const phasePacing = "pacing"

// relocatePaced runs a background relocation of obj that must wait for the
// node's pacing (admit), listed while it waits; detached, it answers at
// once with the waiting relocation's status.
func (n *Node) relocatePaced(ctx context.Context, obj keyspace.Object, opts RelocateOptions, units float64) (*pb.RelocationStatus, error) {
	id := wire.NewRelocationID()
	now := n.now()
	rec := n.relocs.Track(&pb.RelocationStatus{RelocationId: id[:], Object: obj.String(), Source: n.self.String(), Target: opts.Target,
		Role: "source", Phase: phasePacing, StartedUnixMs: now.UnixMilli(),
		Timeline: []*pb.TimelineMark{{Step: phasePacing, UnixUs: now.UnixMicro()}}})
	run := func(ctx context.Context) (*pb.RelocationStatus, error) {
		waited, err := n.admit(ctx, obj, units, opts.Timeout)
		if err == nil {
			opts.Timeout -= waited // the caller's bound holds: the wait is part of it
			opts.paced, opts.Detach = rec, false
			var st *pb.RelocationStatus
			if st, err = n.relocateNow(ctx, obj, opts, units); err == nil {
				return st, nil // it ran in rec, which its run ended
			}
		}
		n.endUnstarted(rec, unstartedOutcome(err), wire.CodeOf(err), err.Error())
		n.relocs.Untrack(rec)
		return nil, err
	}
	if !opts.Detach {
		return run(ctx)
	}
	n.mu.Lock()
	closing := n.closing
	if !closing {
		n.detached.Add(1)
	}
	n.mu.Unlock()
	if closing {
		err := fmt.Errorf("%w: %s was not relocated", ErrStopping, obj)
		n.endUnstarted(rec, relocation.Shutdown, wire.CodeOf(err), err.Error())
		n.relocs.Untrack(rec)
		return nil, err
	}
	st := rec.Snapshot()
	go func() {
		defer n.detached.Done()
		// Not the caller's context: it ends with the answer. The
		// relocation's timeout bounds the wait and what follows.
		ctx, cancel := context.WithTimeout(n.life, opts.Timeout)
		defer cancel()
		_, _ = run(ctx)
	}()
	return st, nil
}

// unstartedOutcome is the outcome of a relocation that ended with err
// before its intent: shutdown when the node stops, else aborted (the
// object stays where it was).
func unstartedOutcome(err error) relocation.Outcome {
	if errors.Is(err, ErrStopping) {
		return relocation.Shutdown
	}
	return relocation.Aborted
}

// endUnstarted ends rec, a source relocation that wrote nothing (no
// intent), with outcome, code and msg, counted as the relocator's outcomes
// are; whoever tracked rec untracks it.
func (n *Node) endUnstarted(rec *reloclog.Record, outcome relocation.Outcome, code pb.Code, msg string) {
	now := n.now()
	rec.Set(func(s *pb.RelocationStatus) {
		s.Phase, s.Outcome, s.Code, s.Message, s.EndedUnixMs = "done", outcome.String(), code, msg, now.UnixMilli()
		s.Timeline = append(s.Timeline, &pb.TimelineMark{Step: "done", UnixUs: now.UnixMicro()})
	})
	n.metrics.Relocations.WithLabelValues("source", outcome.String()).Inc()
}
