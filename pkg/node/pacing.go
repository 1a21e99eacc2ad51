package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/pacing"
)

// Background relocations, paced so that the calls this node serves keep
// their latency (pkg/node/pacing waits; this file asks it).

// ErrRelocationDeferred: a background relocation waited for the node's
// pacing as long as its timeout allows and did not start (the node's calls
// were slow, so background work starts at a lower rate); nothing was done.
// Ask again later, or as a foreground relocation.
var ErrRelocationDeferred = pacing.ErrDeferred

// admit waits until a relocation of obj, costing units (backgroundUnits)
// and whose timeout is timeout, may start, and returns how long it waited.
// One of 0 units (foreground, a draining node's, pacing off) starts at
// once; a background one waits for the node's Pacer, at most half its timeout (then
// ErrRelocationDeferred: the relocation keeps the other half), ctx's end
// or the node's stop. Nothing is held while it waits: the object serves
// on, and may meanwhile move otherwise.
func (n *Node) admit(ctx context.Context, obj keyspace.Object, cost float64, timeout time.Duration) (time.Duration, error) {
	if cost == 0 {
		return 0, nil
	}
	waited, err := n.pacing.Wait(ctx, cost, timeout/2)
	switch {
	case errors.Is(err, ErrRelocationDeferred):
		err = fmt.Errorf("%w: %s waited %s, half its timeout (%.3g units; background relocations start at %.3g units/s now)", err, obj, timeout/2, cost, n.pacing.Rate())
	case errors.Is(err, ErrStopping):
		err = fmt.Errorf("%w: %s was not relocated", err, obj)
	}
	return waited, err
}

// relocationUnits is what a relocation of obj costs the Pacer: one unit,
// and one per MiB of the states it moves as far as this node knows them
// (a group's: its members hosted here, as the location cache lists them).
func (n *Node) relocationUnits(obj keyspace.Object) float64 {
	names := []string{obj.String()}
	if obj.Kind == keyspace.KindGroup {
		names = nil
		if gs, ok := n.cache.Group(obj.String()); ok {
			names = gs.Record.Members
		}
	}
	bytes := 0
	for _, name := range names {
		if h := n.hostedObject(name); h != nil {
			bytes += max(0, h.KnownStateBytes())
		}
	}
	return 1 + float64(bytes)/(1<<20)
}

// BackgroundRate is the rate, in units per second, at which this node
// starts background relocations now: +Inf while it does not pace them
// (pacing off, or its calls' latency within the target). A relocation is
// one unit and one more per MiB of its state.
func (n *Node) BackgroundRate() float64 { return n.pacing.Rate() }
