package locationd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/placement"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Errors of the relocation routes (classified by errorTable).
var (
	// errConflict: the cluster's state does not allow the request now (the
	// owner does not host the object, it is already relocating, the target is
	// not eligible).
	errConflict = wire.Sentinel(pb.Code_CODE_CONFLICT, "locationd: conflict")
	// errOwnerNotAlive: the object's owner has no live key of its generation;
	// nobody can move the object until it is recovered (its next call does it).
	errOwnerNotAlive = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "locationd: owner not alive")
	// errNodeUnavailable: the node did not answer, or could not do it now.
	errNodeUnavailable = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "locationd: node unavailable")
)

// maxRelocationTimeout bounds --relocation-timeout and timeoutMs.
const maxRelocationTimeout = api.MaxRelocationTimeoutMs * time.Millisecond

// maxRequestBody bounds the body of every POST (readBody).
const maxRequestBody = 64 << 10

// timeJSON is the API's time format (RFC 3339, milliseconds, UTC); "" for 0.
func timeJSON(unixMs int64) string {
	if unixMs <= 0 {
		return ""
	}
	return time.UnixMilli(unixMs).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// relocationJSON converts a node's status; node is the reporting owner id.
func relocationJSON(st *pb.RelocationStatus, node string) api.Relocation {
	var id wire.RelocationID
	copy(id[:], st.GetRelocationId())
	out := api.Relocation{
		RelocationID:       id.String(),
		Object:             st.GetObject(),
		Source:             st.GetSource(),
		Target:             st.GetTarget(),
		Role:               st.GetRole(),
		Node:               node,
		Phase:              st.GetPhase(),
		Outcome:            st.GetOutcome(),
		Message:            st.GetMessage(),
		Started:            timeJSON(st.GetStartedUnixMs()),
		StartedUnixMs:      st.GetStartedUnixMs(),
		Ended:              timeJSON(st.GetEndedUnixMs()),
		EndedUnixMs:        st.GetEndedUnixMs(),
		InterruptionMicros: st.GetInterruptionUs(),
		SealedUnixMicros:   st.GetSealedUnixUs(),
		AdmittedUnixMicros: st.GetAdmittedUnixUs(),
		PayloadBytes:       st.GetPayloadBytes(),
		PrecopyBytes:       st.GetPrecopyBytes(),
		SealedBytes:        st.GetSealedBytes(),
		TraceID:            st.GetTraceId(),
	}
	if out.Outcome != "" { // in flight, the code says nothing yet
		out.Code = wire.CodeName(st.GetCode())
	}
	for _, m := range st.GetTimeline() {
		out.Timeline = append(out.Timeline, api.TimelineMark{Step: m.GetStep(), AtUnixMicros: m.GetUnixUs()})
	}
	return out
}

// nodeError is the error of a node's AdminService call: the code its gRPC
// status stands for (wire.CodeOf), where it came from, and, for a code that
// has one, a hint of what it means here.
func nodeError(err error, where string, hints map[pb.Code]string) error {
	if errors.Is(err, errNodeUnavailable) {
		return err
	}
	st, _ := status.FromError(err)
	code := wire.CodeOf(err)
	msg := "node " + where + ": " + st.Message()
	if h := hints[code]; h != "" {
		msg += " (" + h + ")"
	}
	return &wire.Error{Code: code, Message: msg}
}

// relocateHints: what a node's refusal of a relocation means.
func relocateHints(object string) map[pb.Code]string {
	return map[pb.Code]string{
		pb.Code_CODE_NOT_OWNER:         "it does not host " + object + ": not active in its memory, or it just moved",
		pb.Code_CODE_DEADLINE_EXCEEDED: "no answer in time; the relocation may still end: see GET /v1/relocations?object=" + object,
	}
}

// relocationPlan is what a relocation needs from etcd: the record, its live
// owner's address, and the target's descriptor, all at one revision.
type relocationPlan struct {
	snap  authority.Snapshot
	owner lease.Descriptor
}

// plan reads the record, its owner's key and the target's at one revision
// (retrying if the owner changed between the reads) and refuses what cannot
// work: an owner that is not alive, a target that is not eligible.
func (h *handlers) plan(ctx context.Context, obj keyspace.Object, target string) (relocationPlan, error) {
	const attempts = 3
	for range attempts {
		first, err := h.st.Read(ctx, obj)
		if err != nil {
			return relocationPlan{}, err
		}
		if first.Record.Asleep() {
			return relocationPlan{}, fmt.Errorf("%w: %s is asleep: no node holds it, and its next call wakes it where placement chooses", errConflict, obj)
		}
		id := first.Record.Owner.ID
		if err := keyspace.ValidateOwnerID(id); err != nil {
			return relocationPlan{}, fmt.Errorf("%w: %s has owner id %q: %w", authority.ErrInvalidRecord, obj, id, err)
		}
		ids := []string{id}
		if target != "" && target != id {
			ids = append(ids, target)
		}
		v, err := h.st.ReadMany(ctx, []keyspace.Object{obj}, ids)
		if err != nil {
			return relocationPlan{}, err
		}
		snap, ok := v.Objects[obj.String()]
		if !ok {
			return relocationPlan{}, fmt.Errorf("%w: %s", authority.ErrNotFound, obj)
		}
		if snap.Record.Owner.ID != id {
			continue
		}
		rec := snap.Record
		if !v.Alive(rec.Owner) {
			return relocationPlan{}, fmt.Errorf("%w: %s of %s has no live key of that generation (the object is recovered on a live node when it is next called)",
				errOwnerNotAlive, rec.Owner, obj)
		}
		owner, err := lease.DecodeDescriptor(v.Owners[id].Value)
		if err != nil || owner.Address == "" {
			return relocationPlan{}, fmt.Errorf("%w: owner %s advertises no gRPC address", errNodeUnavailable, rec.Owner)
		}
		if target != "" {
			if err := eligible(obj, rec, owner, target, v.Owners[target]); err != nil {
				return relocationPlan{}, err
			}
		}
		return relocationPlan{snap: snap, owner: owner}, nil
	}
	return relocationPlan{}, fmt.Errorf("%w: %s changed owner during %d reads", errUnavailable, obj, attempts)
}

// eligible applies the target rule (placement.Eligible) as far as locationd
// can judge from the owner keys: the node checks it again, with the types
// of a group's members too.
func eligible(obj keyspace.Object, rec authority.Record, owner lease.Descriptor, target string, key authority.OwnerKey) error {
	if target == rec.Owner.ID {
		return fmt.Errorf("%w: %s is already owned by %s", errConflict, obj, rec.Owner)
	}
	if key.Generation == 0 {
		return fmt.Errorf("%w: target %s is not a live owner", errConflict, target)
	}
	d, err := lease.DecodeDescriptor(key.Value)
	if err != nil {
		return fmt.Errorf("%w: target %s has an undecodable descriptor", errConflict, target)
	}
	need := placement.Need{Version: owner.ApplicationVersion, From: rec.Owner.ID}
	if obj.Kind == keyspace.KindActor {
		need.Types = []string{obj.Type}
	}
	if why := placement.Ineligible(lease.Owner{Descriptor: d, Generation: key.Generation}.Candidate(), need); why != "" {
		return fmt.Errorf("%w: target %s", errConflict, why)
	}
	return nil
}

// relocate is POST /v1/relocations: it asks the object's owner to move it and
// answers when the relocation ended. ctx is the request's, without a bound:
// the etcd reads get Config.RequestTimeout, the node's answer the relocation's
// timeout plus RelocationSlack. The call to the node does not end with the
// HTTP request: a caller that goes away does not stop the relocation (it is
// listed by GET /v1/relocations); locationd's shutdown does.
func (h *handlers) relocate(ctx context.Context, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	req, obj, err := decodeRelocateBody(r.Body, h.s.cfg.RelocationTimeout)
	if err != nil {
		return nil, err
	}
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if timeout == 0 {
		timeout = h.s.cfg.RelocationTimeout
	}
	detach := req.Wait != nil && !*req.Wait
	if !detach {
		// The answer comes when the relocation ended.
		h.s.holdAnswer(ctx, h.s.cfg.RequestTimeout+timeout+RelocationSlack)
	}

	rctx, cancel := context.WithTimeout(ctx, h.s.cfg.RequestTimeout)
	p, err := h.plan(rctx, obj, req.Target)
	cancel()
	if err != nil {
		return nil, err
	}
	addr := p.owner.Address
	owner := p.snap.Record.Owner
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+RelocationSlack)
	defer cancel()
	var st *pb.RelocationStatus
	err = h.pool.call(cctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
		var err error
		st, err = c.Relocate(ctx, &pb.RelocateCommand{Object: obj.String(), Target: req.Target, TimeoutMs: timeout.Milliseconds(), Detach: detach, Foreground: req.Foreground, NoPrecopy: req.NoPrecopy})
		return err
	})
	if err != nil {
		if errors.Is(err, errNodeUnavailable) {
			return nil, err
		}
		return nil, nodeError(err, owner.String()+" ("+addr+")", relocateHints(obj.String()))
	}
	out := relocationJSON(st, owner.ID)
	if detach {
		h.s.log.Info().Str("relocation", out.RelocationID).Str("object", out.Object).Str("source", out.Source).Str("target", out.Target).
			Msg("relocation asked through the API started")
		return accepted{out}, nil
	}
	h.s.log.Info().Str("relocation", out.RelocationID).Str("object", out.Object).Str("source", out.Source).Str("target", out.Target).
		Str("outcome", out.Outcome).Int64("interruptionMicros", out.InterruptionMicros).Str("message", out.Message).Msg("relocation asked through the API ended")
	return out, nil
}

// relocation is GET /v1/relocations/{id}: that relocation as its source
// reports it (while it runs and after; its target's report when the source
// does not answer), asked of every live owner, with the other side's
// report and the time both spent in each phase (api.RelocationDetail).
func (h *handlers) relocation(ctx context.Context, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	id, err := wire.ParseRelocationID(r.PathValue("id"))
	if err != nil {
		return nil, fmt.Errorf("%w: relocation id %q: %w", errInvalidArgument, r.PathValue("id"), err)
	}
	all, err := h.listRelocations(ctx, func(rel api.Relocation) bool { return rel.RelocationID == id.String() })
	if err != nil {
		return nil, err
	}
	var src, tgt *api.Relocation
	for i := range all.Relocations {
		switch rel := &all.Relocations[i]; rel.Role {
		case "source":
			src = rel
		case "target":
			tgt = rel
		}
	}
	if src != nil || tgt != nil {
		out := api.RelocationDetail{Phases: api.Phases(src, tgt)}
		if src != nil {
			out.Relocation, out.Counterpart = *src, tgt
		} else {
			out.Relocation = *tgt
		}
		return out, nil
	}
	if len(all.Unreachable) > 0 {
		return nil, fmt.Errorf("%w: relocation %s: %d node(s) did not answer (%s: %s)", errNodeUnavailable, id, len(all.Unreachable), all.Unreachable[0].ID, all.Unreachable[0].Error)
	}
	return nil, fmt.Errorf("%w: relocation %s: no live node reports it (it never existed, or its nodes restarted, or it is older than their last 256)", authority.ErrNotFound, id)
}

// relocations is GET /v1/relocations: every live owner's in-flight and recent
// relocations, asked concurrently, each node bounded by NodeListTimeout; a
// node that does not answer is listed as unreachable.
func (h *handlers) relocations(ctx context.Context, r *http.Request) (any, error) {
	q, err := query(r, "object", "inflight")
	if err != nil {
		return nil, err
	}
	object, filterObject := q["object"]
	if filterObject {
		obj, err := keyspace.ParseObject(object)
		if err != nil {
			return nil, err
		}
		object = obj.String()
	}
	inflight, err := queryBool(q, "inflight")
	if err != nil {
		return nil, err
	}
	return h.listRelocations(ctx, func(rel api.Relocation) bool {
		return (!filterObject || rel.Object == object) && (inflight == nil || *inflight == rel.InFlight())
	})
}

// listRelocations asks every live owner for its relocations, concurrently,
// each node bounded by NodeListTimeout, and keeps those keep says; a node
// that does not answer is listed as unreachable.
func (h *handlers) listRelocations(ctx context.Context, keep func(api.Relocation) bool) (api.RelocationsResponse, error) {
	owners, _, err := lease.ListOwners(ctx, h.cli, h.s.keys)
	if err != nil {
		return api.RelocationsResponse{}, err
	}
	out := api.RelocationsResponse{Relocations: []api.Relocation{}, Unreachable: []api.UnreachableNode{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, o := range owners {
		d := o.Descriptor
		if d.Address == "" {
			mu.Lock()
			out.Unreachable = append(out.Unreachable, api.UnreachableNode{ID: d.OwnerID, Error: "advertises no gRPC address"})
			mu.Unlock()
			continue
		}
		addr := d.Address
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, NodeListTimeout)
			defer cancel()
			var resp *pb.ListRelocationsResponse
			err := h.pool.call(nctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
				var err error
				resp, err = c.ListRelocations(ctx, &pb.ListRelocationsRequest{})
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				msg := err.Error()
				if st, ok := status.FromError(err); ok {
					msg = st.Code().String() + ": " + st.Message()
				}
				out.Unreachable = append(out.Unreachable, api.UnreachableNode{ID: d.OwnerID, Address: d.Address, Error: msg})
				return
			}
			for _, st := range resp.GetRelocations() {
				if rel := relocationJSON(st, d.OwnerID); keep(rel) {
					out.Relocations = append(out.Relocations, rel)
				}
			}
		})
	}
	wg.Wait()
	sortRelocations(out.Relocations)
	slices.SortFunc(out.Unreachable, func(a, b api.UnreachableNode) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// sortRelocations puts the in-flight relocations first (newest start first),
// then the ended ones, the most recently ended first; ties by id, then role.
func sortRelocations(rs []api.Relocation) {
	slices.SortStableFunc(rs, func(a, b api.Relocation) int {
		if a.InFlight() != b.InFlight() {
			if a.InFlight() {
				return -1
			}
			return 1
		}
		ka, kb := a.EndedUnixMs, b.EndedUnixMs
		if a.InFlight() {
			ka, kb = a.StartedUnixMs, b.StartedUnixMs
		}
		if ka != kb {
			if ka > kb {
				return -1
			}
			return 1
		}
		if c := strings.Compare(a.RelocationID, b.RelocationID); c != 0 {
			return c
		}
		return strings.Compare(a.Role, b.Role)
	})
}
