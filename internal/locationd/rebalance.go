package locationd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/rebalance"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// RebalanceConcurrency is how many moves of a plan run at a time (each is
// one relocation asked of its owner).
const RebalanceConcurrency = 4

// rebalanceRoutes adds GET /v1/rebalance/plan and POST /v1/rebalance to mux,
// and the rebalancer's metric to the registry.
func (h *handlers) rebalanceRoutes(mux *http.ServeMux) {
	s := h.s
	h.moves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshloc_rebalance_moves_total",
		Help: "Moves run by POST /v1/rebalance, by reason (load, weight, drain) and outcome (completed, aborted, failed, shutdown, skipped, error).",
	}, []string{"reason", "outcome"})
	s.reg.MustRegister(h.moves)

	const planRoute, runRoute = "/v1/rebalance/plan", "/v1/rebalance"
	mux.Handle(planRoute, s.m.instrument(planRoute, s.getOnly(s.serve(planRoute, h.rebalancePlan, s.cfg.RequestTimeout))))
	mux.Handle(runRoute, s.postOnly(runRoute, "; the plan alone is GET /v1/rebalance/plan", s.serve(runRoute, h.rebalance, 0)))
}

func checkBudget(b int) (int, error) {
	if b == 0 {
		return api.DefaultRebalanceBudget, nil
	}
	if b < 1 || b > api.MaxRebalanceBudget {
		return 0, fmt.Errorf("%w: budget %d (want 1..%d; 0 or absent: %d)", errInvalidArgument, b, api.MaxRebalanceBudget, api.DefaultRebalanceBudget)
	}
	return b, nil
}

// rebalancePlan is GET /v1/rebalance/plan?budget=N[&colocate=true]: the
// plan, nothing moved.
func (h *handlers) rebalancePlan(ctx context.Context, r *http.Request) (any, error) {
	q, err := query(r, "budget", "colocate")
	if err != nil {
		return nil, err
	}
	budget := 0
	if v, given := q["budget"]; given {
		if budget, err = strconv.Atoi(v); err != nil || budget == 0 {
			return nil, fmt.Errorf("%w: budget %q (want an integer 1..%d)", errInvalidArgument, v, api.MaxRebalanceBudget)
		}
	}
	if budget, err = checkBudget(budget); err != nil {
		return nil, err
	}
	colocate := false
	if v, given := q["colocate"]; given {
		if colocate, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("%w: colocate %q (want true or false)", errInvalidArgument, v)
		}
	}
	return h.makePlan(ctx, budget, colocate)
}

// makePlan reads every record and owner key at one revision and plans;
// with colocate, from the live nodes' traffic too (colocate.go).
func (h *handlers) makePlan(ctx context.Context, budget int, colocate bool) (api.RebalancePlan, error) {
	in, rev, err := h.rebalanceInput(ctx)
	if err != nil {
		return api.RebalancePlan{}, err
	}
	in.Budget, in.Tolerance = budget, rebalance.DefaultTolerance
	var tr *api.RebalanceTraffic
	if colocate {
		in.Colocate = true
		in.Edges, tr = h.trafficEdges(ctx)
	}
	p, err := rebalance.Make(in)
	if err != nil {
		return api.RebalancePlan{}, fmt.Errorf("%w: %w", errInvalidArgument, err)
	}
	out := api.RebalancePlan{Revision: rev, Budget: budget, Tolerance: in.Tolerance, DryRun: true, BudgetExhausted: p.BudgetExhausted,
		Moves: []api.RebalanceMove{}, Owners: []api.RebalanceOwner{}, Stuck: []api.RebalanceStuck{}}
	for _, m := range p.Moves {
		out.Moves = append(out.Moves, api.RebalanceMove{Object: m.Object, From: m.From, To: m.To, Reason: string(m.Reason), Units: m.Units})
	}
	for _, o := range p.Owners {
		out.Owners = append(out.Owners, api.RebalanceOwner{ID: o.ID, Weight: o.Weight, State: o.State, Before: o.Before, After: o.After, Fair: o.Fair})
	}
	for _, s := range p.Stuck {
		out.Stuck = append(out.Stuck, api.RebalanceStuck{Object: s.Object, Owner: s.Owner, Reason: string(s.Reason), Why: s.Why})
	}
	if t := p.Traffic; t != nil && tr != nil {
		out.Colocate = true
		tr.Total, tr.CrossBefore, tr.CrossAfter, tr.Edges = t.Total, t.CrossBefore, t.CrossAfter, t.Edges
		tr.FractionBefore, tr.FractionAfter = t.FractionBefore(), t.FractionAfter()
		out.Traffic = tr
	}
	return out, nil
}

// rebalanceInput is the planner's input: the live owners, and the records
// whose owner is alive (same generation), all at one revision.
func (h *handlers) rebalanceInput(ctx context.Context) (rebalance.Input, int64, error) {
	const attempts = 3
	var err error
	for range attempts {
		var snaps []authority.Snapshot
		var rev int64
		snaps, rev, err = h.st.List(ctx, authority.ListOptions{})
		if err != nil {
			return rebalance.Input{}, 0, err
		}
		var resp *clientv3.GetResponse
		resp, err = h.cli.Get(ctx, h.s.keys.OwnersPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev))
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue
		}
		if err != nil {
			return rebalance.Input{}, 0, fmt.Errorf("locationd: owners at revision %d: %w", rev, err)
		}
		var in rebalance.Input
		gens := map[string]int64{}
		for _, kv := range resp.Kvs {
			id, perr := h.s.keys.ParseOwner(string(kv.Key))
			if perr != nil {
				continue
			}
			d, derr := lease.DecodeDescriptor(kv.Value)
			if derr != nil {
				continue // an owner we cannot read takes nothing
			}
			gens[id] = kv.CreateRevision
			in.Owners = append(in.Owners, rebalance.Owner{ID: id, Weight: d.Weight, State: string(d.State), Types: d.Types, ApplicationVersion: d.ApplicationVersion})
		}
		for _, s := range snaps {
			rec := s.Record
			if !alive(gens, rec.Owner) {
				continue // asleep (no owner), or an orphan: the recovery controller's business
			}
			in.Objects = append(in.Objects, rebalance.Object{
				Name: s.Object.String(), Owner: rec.Owner.ID, Type: rec.Type, Pinned: rec.Pinned,
				Busy: rec.State == authority.StateRelocating, Group: rec.Group, Members: rec.Members,
			})
		}
		return in, rev, nil
	}
	return rebalance.Input{}, 0, fmt.Errorf("%w: revisions compacted during %d list attempts: %w", errUnavailable, attempts, err)
}

// rebalance is POST /v1/rebalance {budget, dryRun}: it plans and, unless
// dryRun, runs the moves RebalanceConcurrency at a time through the owners'
// AdminService.Relocate, and answers when every move ended, with each
// outcome. Like POST /v1/relocations, the moves do not stop if the HTTP
// caller goes away; locationd's shutdown stops them.
func (h *handlers) rebalance(ctx context.Context, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	req, budget, err := decodeRebalanceBody(r.Body)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, h.s.cfg.RequestTimeout)
	plan, err := h.makePlan(pctx, budget, req.Colocate)
	cancel()
	if err != nil || req.DryRun {
		return plan, err
	}
	plan.DryRun = false
	// Actors leaving one owner for one target move in bulk moves (one
	// AdminService.RelocateMany each, at most rebalanceBulk objects); a
	// group moves alone. The answer comes when every move ended: a batch
	// takes at most a relocation's time, and RebalanceConcurrency run at a
	// time (one wave more than the batches fill).
	batches := rebalanceBatches(plan.Moves)
	waves := (len(batches)+RebalanceConcurrency-1)/RebalanceConcurrency + 1
	h.s.holdAnswer(ctx, time.Duration(waves)*(h.s.cfg.RequestTimeout+h.s.cfg.RelocationTimeout+RelocationSlack))
	rctx := context.WithoutCancel(ctx)
	next := make(chan []int)
	var wg sync.WaitGroup
	for range min(RebalanceConcurrency, len(batches)) {
		wg.Go(func() {
			for b := range next {
				if len(b) == 1 {
					plan.Moves[b[0]] = h.runMove(rctx, plan.Moves[b[0]])
					continue
				}
				h.runBatch(rctx, plan.Moves, b)
			}
		})
	}
	for _, b := range batches {
		next <- b
	}
	close(next)
	wg.Wait()
	for _, m := range plan.Moves {
		switch m.Outcome {
		case api.OutcomeCompleted:
			plan.Completed++
		case api.OutcomeSkipped:
			plan.Skipped++
		default:
			plan.Failed++
		}
		h.moves.WithLabelValues(m.Reason, m.Outcome).Inc()
	}
	h.s.log.Info().Int("moves", len(plan.Moves)).Int("completed", plan.Completed).Int("skipped", plan.Skipped).
		Int("failed", plan.Failed).Bool("budgetExhausted", plan.BudgetExhausted).Msg("rebalance ran")
	return plan, nil
}

// rebalanceBulk bounds the objects of one bulk move of a rebalance.
const rebalanceBulk = 512

// rebalanceBatches groups the moves of a plan (their indexes): the actors
// from one owner to one target in batches of at most rebalanceBulk, each
// group alone.
func rebalanceBatches(moves []api.RebalanceMove) [][]int {
	var out [][]int
	open := map[[2]string]int{} // (from, to) -> its batch being filled
	for i, m := range moves {
		if strings.HasPrefix(m.Object, string(keyspace.KindGroup)+"/") {
			out = append(out, []int{i})
			continue
		}
		k := [2]string{m.From, m.To}
		b, ok := open[k]
		if !ok || len(out[b]) >= rebalanceBulk {
			b = len(out)
			out = append(out, nil)
			open[k] = b
		}
		out[b] = append(out[b], i)
	}
	return out
}

// runBatch asks the owner the moves idx leave to move them to their target
// as bulk moves (AdminService.RelocateMany, pinned objects refused), and
// records each one's outcome in moves. The owner checks each object as it
// takes it (hosted and serving there, not relocating, not pinned): one it
// refuses is skipped.
func (h *handlers) runBatch(ctx context.Context, moves []api.RebalanceMove, idx []int) {
	from, to := moves[idx[0]].From, moves[idx[0]].To
	fail := func(outcome string, err error) {
		e := toAPIError(err)
		for _, i := range idx {
			moves[i].Outcome, moves[i].Code, moves[i].Message = outcome, e.Code, e.Message
		}
	}
	rctx, cancel := context.WithTimeout(ctx, h.s.cfg.RequestTimeout)
	owners, _, err := lease.ListOwners(rctx, h.cli, h.s.keys)
	cancel()
	if err != nil {
		fail(api.OutcomeError, err)
		return
	}
	i := slices.IndexFunc(owners, func(o lease.Owner) bool { return o.Descriptor.OwnerID == from })
	if i < 0 || owners[i].Descriptor.Address == "" {
		fail(api.OutcomeSkipped, fmt.Errorf("%w: %s has no live owner key", errConflict, from))
		return
	}
	addr := owners[i].Descriptor.Address
	cmd := &pb.RelocateManyCommand{Target: to, TimeoutMs: h.s.cfg.RelocationTimeout.Milliseconds(), SkipPinned: true}
	for _, k := range idx {
		cmd.Objects = append(cmd.Objects, moves[k].Object)
	}
	cctx, cancel := context.WithTimeout(ctx, h.s.cfg.RelocationTimeout*2+RelocationSlack)
	defer cancel()
	var res *pb.RelocateManyResult
	err = h.pool.call(cctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
		var err error
		// Background: the owner paces it while its calls are slow.
		res, err = c.RelocateMany(ctx, cmd)
		return err
	})
	if err != nil {
		if !errors.Is(err, errNodeUnavailable) {
			err = nodeError(err, from+" ("+addr+")", nil)
		}
		if toAPIError(err).Code == api.CodeResourceExhausted {
			fail(api.OutcomeSkipped, err) // refused before anything was done: the next pass plans them again
			return
		}
		fail(api.OutcomeError, err)
		return
	}
	for k, o := range res.GetOutcomes() {
		if k >= len(idx) || o.GetObject() != moves[idx[k]].Object {
			fail(api.OutcomeError, fmt.Errorf("%w: %s answered a bulk move out of order", errNodeUnavailable, from))
			return
		}
		m := &moves[idx[k]]
		m.Outcome, m.Message = o.GetOutcome(), o.GetMessage()
		if o.GetCode() != pb.Code_CODE_UNSPECIFIED {
			m.Code = wire.CodeName(o.GetCode())
		}
		if m.Outcome == api.OutcomeRefused {
			m.Outcome = api.OutcomeSkipped
		}
		m.RelocationID = relocationIDText(o.GetRelocationId())
	}
	h.s.log.Info().Str("from", from).Str("to", to).Int("objects", len(idx)).Msg("rebalance bulk move ended")
}

// runMove checks the move against etcd again (the object is still on its
// source, not pinned, not relocating; the target still takes it) and asks
// the source to relocate it to the target.
func (h *handlers) runMove(ctx context.Context, m api.RebalanceMove) api.RebalanceMove {
	fail := func(outcome string, err error) api.RebalanceMove {
		e := toAPIError(err)
		m.Outcome, m.Code, m.Message = outcome, e.Code, e.Message
		return m
	}
	obj, err := keyspace.ParseObject(m.Object)
	if err != nil {
		return fail(api.OutcomeError, err)
	}
	rctx, cancel := context.WithTimeout(ctx, h.s.cfg.RequestTimeout)
	p, err := h.plan(rctx, obj, m.To)
	cancel()
	if err != nil {
		return fail(api.OutcomeError, err)
	}
	rec := p.snap.Record
	switch {
	case rec.Owner.ID != m.From:
		return fail(api.OutcomeSkipped, fmt.Errorf("%w: %s is owned by %s now, not %s", errConflict, m.Object, rec.Owner, m.From))
	case rec.Pinned:
		return fail(api.OutcomeSkipped, fmt.Errorf("%w: %s is pinned", errConflict, m.Object))
	case rec.State == authority.StateRelocating:
		return fail(api.OutcomeSkipped, fmt.Errorf("%w: %s is relocating", errConflict, m.Object))
	}
	timeout := h.s.cfg.RelocationTimeout
	cctx, cancel := context.WithTimeout(ctx, timeout+RelocationSlack)
	defer cancel()
	addr := p.owner.Address
	var st *pb.RelocationStatus
	err = h.pool.call(cctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
		var err error
		// Background: the owner paces it while its calls are slow.
		st, err = c.Relocate(ctx, &pb.RelocateCommand{Object: obj.String(), Target: m.To, TimeoutMs: timeout.Milliseconds()})
		return err
	})
	if err != nil {
		if !errors.Is(err, errNodeUnavailable) {
			err = nodeError(err, rec.Owner.String()+" ("+addr+")", relocateHints(obj.String()))
		}
		if toAPIError(err).Code == api.CodeResourceExhausted {
			// Refused before anything was done (the owner paces background
			// relocations while its calls are slow, or a limit): the next
			// pass plans it again.
			return fail(api.OutcomeSkipped, err)
		}
		return fail(api.OutcomeError, err)
	}
	rel := relocationJSON(st, rec.Owner.ID)
	m.Outcome, m.Code, m.Message, m.RelocationID, m.InterruptionMicros = rel.Outcome, rel.Code, rel.Message, rel.RelocationID, rel.InterruptionMicros
	h.s.log.Info().Str("object", m.Object).Str("from", m.From).Str("to", m.To).Str("reason", m.Reason).
		Str("relocation", m.RelocationID).Str("outcome", m.Outcome).Str("message", m.Message).Msg("rebalance move ended")
	return m
}
