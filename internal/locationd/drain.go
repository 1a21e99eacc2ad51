package locationd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Drain (POST /v1/owners/{id}/drain): locationd finds the owner's address in
// its live key and calls its AdminService.Drain; the node moves every object
// it hosts away and, unless stopAfter is false, stops (docs/design.md §7). The
// answer streams: once the node answered its first event, the status is 200
// and the body is one JSON object per line (application/x-ndjson): progress
// events, then a "report" line, then with list the "page" lines of the full
// list — or an "error" line if the node's stream broke (the drain may still run: it is the node's). Errors found before the
// node answered are the API's usual JSON errors: a bad owner id or body is
// 400 invalid_argument, an owner without a live key 404 not_found, a node
// that cannot be reached or is stopping 503 unavailable. Like a relocation,
// the drain does not stop if the HTTP caller goes away.

// errOwnerNotFound: no live key owners/<id>.
var errOwnerNotFound = wire.Sentinel(pb.Code_CODE_NOT_FOUND, "locationd: owner not found")

// drainRoute is the pattern of the drain route.
const drainRoute = "/v1/owners/{id}/drain"

// drainSlack is how much longer than the drain's bound locationd waits for
// the node's stream: relocations in flight at the drain's deadline end by
// their own deadline (the node's --relocation-timeout), then the node stops.
const drainSlack = time.Minute

// drainWait bounds the wait for a drain: its deadline follows its progress
// (timeoutMs is how long it may go without moving an object), so it may run
// as long as the longest drain a node runs.
const drainWait = api.MaxDrainTimeoutMs * time.Millisecond

// drainHTTP serves a POST of drainRoute whose body was read (postOnly).
func (h *handlers) drainHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.drain(w, r); err != nil {
		// An error answered after the node call (it failed before its
		// first event) may come long after the request was read.
		h.s.setWriteDeadline(http.NewResponseController(w), h.s.cfg.HTTPWriteTimeout)
		h.s.writeError(w, r, drainRoute, err)
	}
}

// drain runs one drain. It returns an error only before the answer began
// (the caller writes it as the API's JSON error).
func (h *handlers) drain(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := keyspace.ValidateOwnerID(id); err != nil {
		return fmt.Errorf("%w: owner: %w", errInvalidArgument, err)
	}
	req, err := decodeDrainBody(r.Body)
	if err != nil {
		return err
	}
	wait := drainWait
	// The answer streams for as long as the drain runs: the connection's
	// write deadline is lifted to the drain's bound, and each line must
	// still be written within HTTPWriteTimeout (write, below).
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(h.s.cfg.RequestTimeout + wait + drainSlack + h.s.cfg.HTTPWriteTimeout)
	h.s.setWriteDeadline(rc, time.Until(deadline))
	rctx, cancel := context.WithTimeout(r.Context(), h.s.cfg.RequestTimeout)
	owners, _, err := lease.ListOwners(rctx, h.cli, h.s.keys)
	cancel()
	if err != nil {
		return err
	}
	var owner *lease.Owner
	for i := range owners {
		if owners[i].Descriptor.OwnerID == id {
			owner = &owners[i]
		}
	}
	if owner == nil {
		return fmt.Errorf("%w: %s has no live owner key (see GET /v1/owners)", errOwnerNotFound, id)
	}
	addr := owner.Descriptor.Address
	pair := fmt.Sprintf("%s@%d", id, owner.Generation)
	if addr == "" {
		return fmt.Errorf("%w: owner %s advertises no gRPC address", errNodeUnavailable, pair)
	}
	preq := &pb.DrainRequest{Concurrency: uint32(req.Concurrency), TimeoutMs: req.TimeoutMs, StopAfter: req.StopAfter, List: req.List}
	// Detached from the HTTP request: a caller that goes away does not
	// stop the drain, and locationd still logs its report.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), wait+drainSlack)
	defer cancel()
	started := false
	var writeErr error
	write := func(ev api.DrainEvent) {
		if !started {
			started = true
			w.Header().Set("Content-Type", api.DrainContentType)
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
		}
		if writeErr != nil {
			return
		}
		b, _ := json.Marshal(ev)
		h.s.setWriteDeadline(rc, h.s.cfg.HTTPWriteTimeout)
		if _, writeErr = w.Write(append(b, '\n')); writeErr == nil {
			writeErr = rc.Flush()
		}
		if writeErr == nil {
			h.s.setWriteDeadline(rc, time.Until(deadline)) // until the next line
		}
	}
	var report *api.DrainReport
	err = h.pool.call(cctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
		stream, err := c.Drain(ctx, preq)
		if err != nil {
			return err
		}
		for {
			ev, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				if report == nil {
					return fmt.Errorf("%w: node %s (%s) ended the drain's stream without a report", errNodeUnavailable, pair, addr)
				}
				return nil
			}
			if err != nil {
				return err
			}
			out := drainEventJSON(ev)
			if out.Report != nil {
				report = out.Report
			}
			if out.Kind == api.DrainKindPage && report == nil {
				return fmt.Errorf("%w: node %s (%s) sent a page of its drain's list before its report", errNodeUnavailable, pair, addr)
			}
			write(out)
		}
	})
	if err != nil {
		if !errors.Is(err, errNodeUnavailable) {
			err = nodeError(err, pair+" ("+addr+")", map[pb.Code]string{pb.Code_CODE_DEADLINE_EXCEEDED: "the drain did not end in time; it may still run"})
		}
		if !started {
			return err
		}
		e := toAPIError(err)
		write(api.DrainEvent{Kind: api.DrainKindError, Error: e})
		h.s.log.Warn().Str("owner", pair).Err(err).Msg("drain asked through the API: the node's stream broke")
		return nil
	}
	h.s.log.Info().Str("owner", report.Owner).Int("moved", report.MovedCount).Int("failed", report.FailedCount).
		Int64("durationMicros", report.DurationMicros).Bool("stopping", report.Stopping).Str("endedEarly", report.EndedEarly).
		Msg("drain asked through the API ended")
	return nil
}

func relocationIDText(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var id wire.RelocationID
	copy(id[:], b)
	return id.String()
}

// drainEventJSON converts one event of the node's stream.
func drainEventJSON(ev *pb.DrainEvent) api.DrainEvent {
	if r := ev.GetReport(); r != nil {
		rep := &api.DrainReport{
			Owner: r.GetOwner(), MovedCount: int(r.GetMovedCount()), FailedCount: int(r.GetFailedCount()), Bulks: int(r.GetBulks()),
			Failed:  drainFailuresJSON(r.GetFailed()),
			Started: timeJSON(r.GetStartedUnixMs()), StartedUnixMs: r.GetStartedUnixMs(), DurationMicros: r.GetDurationUs(),
			Relocations: int(r.GetRelocations()), Stopping: r.GetStopping(), EndedEarly: r.GetEndedEarly(),
		}
		return api.DrainEvent{Kind: api.DrainKindReport, Moved: rep.MovedCount, Failed: rep.FailedCount, Report: rep}
	}
	if p := ev.GetPage(); p != nil {
		page := &api.DrainPage{Failed: drainFailuresJSON(p.GetFailed()), Last: p.GetLast()}
		for _, m := range p.GetMoved() {
			page.Moved = append(page.Moved, api.DrainedObject{Object: m.GetObject(), Target: m.GetTarget(),
				RelocationID: relocationIDText(m.GetRelocationId()), Attempts: int(m.GetAttempts()), InterruptionMicros: m.GetInterruptionUs()})
		}
		return api.DrainEvent{Kind: api.DrainKindPage, Page: page}
	}
	p := ev.GetProgress()
	out := api.DrainEvent{
		Kind: p.GetKind(), Object: p.GetObject(), Target: p.GetTarget(), Attempt: int(p.GetAttempt()), Message: p.GetMessage(),
		RelocationID: relocationIDText(p.GetRelocationId()), InterruptionMicros: p.GetInterruptionUs(),
		Moved: int(p.GetMoved()), Failed: int(p.GetFailed()), Remaining: int(p.GetRemaining()),
	}
	if p.GetCode() != pb.Code_CODE_UNSPECIFIED {
		out.Code = wire.CodeName(p.GetCode())
	}
	return out
}

func drainFailuresJSON(fs []*pb.DrainFailure) []api.DrainFailure {
	out := make([]api.DrainFailure, 0, len(fs))
	for _, f := range fs {
		out = append(out, api.DrainFailure{Object: f.GetObject(), Code: wire.CodeName(f.GetCode()), Reason: f.GetReason(), Attempts: int(f.GetAttempts())})
	}
	return out
}
