package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/placement"
)

// outcome of one look at an orphan; "" means nothing was attempted (the
// orphan was deferred, or is handled with its group).
type outcome string

const (
	deferred  outcome = ""
	notLeader outcome = "not_leader"
)

// recoverLoop goes over the orphans (in name order) whenever the view
// changes, and every Retry while some remain, attempting at most Rate
// recoveries per second, until ctx ends. A guarded write that finds the
// election key gone ends the term.
func (c *Controller) recoverLoop(ctx context.Context, cancel context.CancelCauseFunc, v *view, guard *authority.Guard, kick chan struct{}) {
	interval := time.Duration(float64(time.Second) / c.cfg.Rate)
	retry := time.NewTicker(c.cfg.Retry)
	defer retry.Stop()
	var next time.Time
	warned := map[string]string{} // last warning per orphan
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-retry.C:
		}
		names := v.orphans()
		if len(warned) > len(names) {
			clear(warned) // forget objects no longer orphaned
		}
		for _, name := range names {
			if !v.orphaned(name) { // recovered meanwhile (by a call, or just now)
				continue
			}
			if wait := time.Until(next); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			if ctx.Err() != nil {
				return
			}
			out, why := c.recoverOne(ctx, v, name, guard)
			if out == deferred {
				continue
			}
			if why != nil && warned[name] != why.Error() { // a repeated warning is not logged again
				c.log.Warn().Str("object", name).Str("outcome", string(out)).Err(why).Msg("recovery not done; looking again later")
			}
			if why != nil {
				warned[name] = why.Error()
			} else {
				delete(warned, name)
			}
			next = time.Now().Add(interval)
			if out == notLeader {
				cancel(ErrNotLeader)
				return
			}
			c.m.recoveries.WithLabelValues(string(out)).Inc()
			c.mu.Lock()
			switch out {
			case OutcomeRecovered:
				c.status.Recovered++
			case OutcomeFailed:
				c.status.Failed++
			}
			c.mu.Unlock()
			if out == OutcomeRecovered && strings.HasPrefix(name, keyspace.KindGroup+"/") {
				select { // its members follow in the next pass
				case kick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// recoverOne judges one orphan again from etcd (record and owner keys at one
// revision) and re-activates it on a live node; see the package doc.
func (c *Controller) recoverOne(ctx context.Context, v *view, name string, guard *authority.Guard) (outcome, error) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return deferred, nil // not a name we can act on; the view never holds one
	}
	first, err := c.st.Read(ctx, obj)
	if errors.Is(err, authority.ErrNotFound) {
		return OutcomeRaced, nil
	}
	if err != nil {
		return OutcomeFailed, err
	}
	ids := []string{first.Record.Owner.ID}
	if in := first.Record.Intent; in != nil && in.Target.ID != first.Record.Owner.ID {
		ids = append(ids, in.Target.ID)
	}
	rv, err := c.st.ReadMany(ctx, []keyspace.Object{obj}, ids)
	if err != nil {
		return OutcomeFailed, err
	}
	snap, ok := rv.Objects[name]
	if !ok || snap.Record.Owner.ID != first.Record.Owner.ID || rv.Alive(snap.Record.Owner) {
		return OutcomeRaced, nil
	}
	rec := snap.Record
	if in := rec.Intent; in != nil && rv.Alive(in.Target) && c.now().Before(time.UnixMilli(in.DeadlineMs).Add(c.cfg.Grace)) {
		return deferred, nil // its target may still commit it, with its state
	}

	// Where: a member follows its group; everything else by placement.
	owners, cands, load := v.candidates()
	var types []string
	switch {
	case obj.Kind == keyspace.KindGroup:
		for _, m := range rec.Members {
			if mo, err := keyspace.ParseObject(m); err == nil && mo.Kind == keyspace.KindActor {
				types = append(types, mo.Type)
			}
		}
	default:
		types = []string{obj.Type}
	}
	pick := -1
	if rec.Group != "" {
		gOwner, exists, alive := v.groupOf(rec.Group)
		switch {
		case exists && !alive:
			return deferred, nil // recovered with its group, which goes first
		case exists:
			for i, o := range owners {
				if o.Descriptor.OwnerID == gOwner.ID && o.Generation == gOwner.Generation && placement.Eligible(cands[i], placement.Need{Types: types}) {
					pick = i
				}
			}
			if pick < 0 {
				return OutcomeNoTarget, fmt.Errorf("the owner %s of its group %s cannot host it", gOwner, rec.Group)
			}
		}
	}
	if pick < 0 {
		i, ok := placement.Choose(name, placement.Need{Types: types}, cands, load)
		if !ok {
			return OutcomeNoTarget, fmt.Errorf("no serving node with weight > 0 hosts %v", types)
		}
		pick = i
	}
	to := owners[pick]
	res, err := c.st.Recover(ctx, authority.RecoverRequest{
		Seen:     snap,
		NewOwner: authority.OwnerRef{ID: to.Descriptor.OwnerID, Generation: to.Generation},
		Node:     authority.NodeRef{RoutingID: to.Descriptor.RoutingID, Address: to.Descriptor.Address},
		Guard:    guard,
	})
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return deferred, nil // the term ended: the next leader looks again
		}
		return OutcomeFailed, err
	case res.GuardLost:
		return notLeader, nil
	case !res.Written:
		return OutcomeRaced, nil
	}
	v.observe(res.Snapshot)
	c.log.Warn().Str("object", name).Str("deadOwner", rec.Owner.String()).Str("newOwner", res.Snapshot.Record.Owner.String()).
		Int64("objectGeneration", res.Snapshot.Record.ObjectGeneration).Msg("recovered an orphan: re-activated on a live node, its state of the previous generation is lost")
	return OutcomeRecovered, nil
}
