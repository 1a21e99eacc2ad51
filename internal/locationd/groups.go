package locationd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Group routes (api/groups.go). locationd reads the records and asks the
// node that may do it through its AdminService: a create goes to the node
// named (or chosen), a join to the actor's owner (the group's owner when
// the actor has no record yet: it is created there as a member), a leave
// to the group's owner.

// groupRoutes adds the group routes to mux.
func (h *handlers) groupRoutes(mux *http.ServeMux) {
	s := h.s
	post := func(route string, f apiHandler) {
		mux.Handle(route, s.postOnly(route, "", s.serve(route, f, 0)))
	}
	post("/v1/groups", h.createGroup)
	post("/v1/groups/join", h.joinGroup)
	post("/v1/groups/leave", h.leaveGroup)
	const read = "/v1/groups/{group...}"
	mux.Handle(read, s.m.instrument(read, s.getOnly(s.serve(read, h.group, s.cfg.RequestTimeout))))
}

// decodeGroupRequest checks the query (none) and reads the body
// (decodeGroupBody) of the group operation op.
func decodeGroupRequest(r *http.Request, op string) (api.GroupRequest, keyspace.Object, keyspace.Object, error) {
	if _, err := query(r); err != nil {
		return api.GroupRequest{}, keyspace.Object{}, keyspace.Object{}, err
	}
	return decodeGroupBody(r.Body, op)
}

// liveOwner is the address of owner o if it is alive (its key has o's generation).
func (h *handlers) liveOwner(ctx context.Context, o authority.OwnerRef, what string) (string, error) {
	owners, _, err := lease.ListOwners(ctx, h.cli, h.s.keys)
	if err != nil {
		return "", err
	}
	for _, x := range owners {
		if x.Descriptor.OwnerID == o.ID && x.Generation == o.Generation {
			if x.Descriptor.Address == "" {
				return "", fmt.Errorf("%w: owner %s advertises no gRPC address", errNodeUnavailable, o)
			}
			return x.Descriptor.Address, nil
		}
	}
	return "", fmt.Errorf("%w: %s of %s has no live key of that generation", errOwnerNotAlive, o, what)
}

func groupJSON(st *pb.GroupStatus, node string) api.Group {
	g := api.Group{Group: st.GetGroup(), Owner: st.GetOwner(), Members: st.GetMembers(), StoreVersion: st.GetStoreVersion()}
	if g.Members == nil {
		g.Members = []string{}
	}
	if r := st.GetRelocation(); r != nil {
		rel := relocationJSON(r, node)
		g.Relocation = &rel
		g.StoreVersion = 0 // the commit is still to come
	}
	return g
}

// createGroup is POST /v1/groups.
func (h *handlers) createGroup(ctx context.Context, r *http.Request) (any, error) {
	req, g, _, err := decodeGroupRequest(r, groupCreate)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, h.s.cfg.RequestTimeout)
	defer cancel()
	owners, _, err := lease.ListOwners(rctx, h.cli, h.s.keys)
	if err != nil {
		return nil, err
	}
	var cands []lease.Owner
	for _, o := range owners {
		d := o.Descriptor
		if req.On != "" {
			if d.OwnerID == req.On {
				cands = append(cands, o)
			}
			continue
		}
		if d.State == lease.StateServing && d.Weight > 0 && d.Address != "" {
			cands = append(cands, o)
		}
	}
	if len(cands) == 0 {
		if req.On != "" {
			return nil, fmt.Errorf("%w: node %s is not a live owner", errOwnerNotFound, req.On)
		}
		return nil, fmt.Errorf("%w: no live serving node with weight > 0 to create %s on", errNodeUnavailable, g)
	}
	o := cands[rand.IntN(len(cands))]
	var st *pb.GroupStatus
	err = h.pool.call(rctx, o.Descriptor.Address, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
		var err error
		st, err = c.CreateGroup(ctx, &pb.GroupCommand{Group: g.String()})
		return err
	})
	if err != nil {
		return nil, nodeError(err, o.Descriptor.OwnerID+" ("+o.Descriptor.Address+")", nil)
	}
	return groupJSON(st, o.Descriptor.OwnerID), nil
}

// joinGroup is POST /v1/groups/join: to the actor's owner (the group's,
// for an actor with no record).
func (h *handlers) joinGroup(ctx context.Context, r *http.Request) (any, error) {
	req, g, a, err := decodeGroupRequest(r, groupJoin)
	if err != nil {
		return nil, err
	}
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if timeout == 0 {
		timeout = h.s.cfg.RelocationTimeout
	}
	// The answer comes when the node answered (at READY of an Actor Join).
	h.s.holdAnswer(ctx, h.s.cfg.RequestTimeout+timeout+RelocationSlack)
	rctx, cancel := context.WithTimeout(ctx, h.s.cfg.RequestTimeout)
	v, err := h.st.ReadMany(rctx, []keyspace.Object{g, a}, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	gs, ok := v.Objects[g.String()]
	if !ok {
		cancel()
		return nil, fmt.Errorf("%w: %s", authority.ErrNotFound, g)
	}
	on, what := gs.Record.Owner, g.String()
	if as, ok := v.Objects[a.String()]; ok {
		on, what = as.Record.Owner, a.String()
	}
	addr, err := h.liveOwner(rctx, on, what)
	cancel()
	if err != nil {
		return nil, err
	}
	// The join answers at READY; the relocation goes on if the caller leaves.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+RelocationSlack)
	defer cancel()
	var st *pb.GroupStatus
	err = h.pool.call(cctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
		var err error
		st, err = c.JoinGroup(ctx, &pb.GroupCommand{Group: g.String(), Actor: a.String(), TimeoutMs: timeout.Milliseconds()})
		return err
	})
	if err != nil {
		return nil, nodeError(err, on.String()+" ("+addr+")", nil)
	}
	out := groupJSON(st, on.ID)
	h.s.log.Info().Str("group", g.String()).Str("actor", a.String()).Str("owner", out.Owner).Msg("join asked through the API answered")
	return out, nil
}

// leaveGroup is POST /v1/groups/leave: to the group's owner.
func (h *handlers) leaveGroup(ctx context.Context, r *http.Request) (any, error) {
	_, g, a, err := decodeGroupRequest(r, groupLeave)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, h.s.cfg.RequestTimeout)
	defer cancel()
	gs, err := h.st.Read(rctx, g)
	if err != nil {
		return nil, err
	}
	addr, err := h.liveOwner(rctx, gs.Record.Owner, g.String())
	if err != nil {
		return nil, err
	}
	var st *pb.GroupStatus
	err = h.pool.call(rctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
		var err error
		st, err = c.LeaveGroup(ctx, &pb.GroupCommand{Group: g.String(), Actor: a.String()})
		return err
	})
	if err != nil {
		return nil, nodeError(err, gs.Record.Owner.String()+" ("+addr+")", nil)
	}
	return groupJSON(st, gs.Record.Owner.ID), nil
}

// group is GET /v1/groups/{group}: the record and whether its owner is
// alive, at one revision.
func (h *handlers) group(ctx context.Context, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	g, err := keyspace.ParseObject(r.PathValue("group"))
	if err != nil {
		return nil, err
	}
	if g.Kind != keyspace.KindGroup {
		return nil, fmt.Errorf("%w: %s is not a group (want /v1/groups/group/<id>)", errInvalidArgument, g)
	}
	first, err := h.st.Read(ctx, g)
	if err != nil {
		return nil, err
	}
	v, err := h.st.ReadMany(ctx, []keyspace.Object{g}, []string{first.Record.Owner.ID})
	if err != nil {
		return nil, err
	}
	snap, ok := v.Objects[g.String()]
	if !ok {
		return nil, fmt.Errorf("%w: %s", authority.ErrNotFound, g)
	}
	members := snap.Record.Members
	if members == nil {
		members = []string{}
	}
	return api.Group{Group: g.String(), Owner: snap.Record.Owner.String(), Members: members, StoreVersion: snap.StoreVersion,
		OwnerAlive: v.Alive(snap.Record.Owner), Revision: v.Revision}, nil
}
