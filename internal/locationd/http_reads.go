package locationd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
)

// The read handlers: health, owners and objects, each read at one revision.

func (h *handlers) healthz(context.Context, *http.Request) (any, error) {
	return api.Status{Status: "ok"}, nil
}

// readyz answers ok when etcd serves a linearizable read within ReadyTimeout
// (so it has a leader and a quorum) and has no alarm raised (NOSPACE:
// every write refused, which a read does not show; etcd.go).
func (h *handlers) readyz(ctx context.Context, _ *http.Request) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	if _, err := h.cli.Get(ctx, h.s.keys.OwnersPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return nil, fmt.Errorf("%w: etcd %v did not answer a read in %s: %w", errUnavailable, h.cli.Endpoints(), ReadyTimeout, err)
	}
	if mon := h.s.etcdMonitor(); mon != nil {
		if err := mon.ready(ctx); err != nil {
			return nil, err
		}
	}
	return api.Status{Status: "ok"}, nil
}

// etcd is GET /v1/etcd: the etcd in use, its sizes, alarms and compaction
// (etcd.go).
func (h *handlers) etcd(ctx context.Context, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	mon := h.s.etcdMonitor()
	if mon == nil {
		return nil, fmt.Errorf("%w: not started yet", errUnavailable)
	}
	return mon.status(ctx)
}

func ownerJSON(o lease.Owner) api.Owner {
	d := o.Descriptor
	out := api.Owner{
		ID:                 d.OwnerID,
		Generation:         o.Generation,
		RoutingID:          d.RoutingID,
		Address:            d.Address,
		State:              string(d.State),
		Weight:             d.Weight,
		ApplicationVersion: d.ApplicationVersion,
		Types:              d.Types,
		StartedUnixMs:      d.StartedUnixMs,
		HTTP:               d.HTTP,
		ModRevision:        o.ModRevision,
	}
	if out.Types == nil {
		out.Types = []string{}
	}
	if d.StartedUnixMs > 0 {
		out.Started = time.UnixMilli(d.StartedUnixMs).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	if o.LeaseID != 0 {
		out.LeaseID = fmt.Sprintf("%016x", o.LeaseID)
	}
	return out
}

func (h *handlers) owners(ctx context.Context, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	owners, rev, err := lease.ListOwners(ctx, h.cli, h.s.keys)
	if err != nil {
		return nil, err
	}
	out := api.OwnersResponse{Revision: rev, Owners: make([]api.Owner, 0, len(owners))}
	for _, o := range owners {
		out.Owners = append(out.Owners, ownerJSON(o))
	}
	return out, nil
}

// listAtOneRevision lists the records (all of them, or the page opt asks
// for when paged), and the generation of every owner key at the same
// revision (0 for an absent key), so that "alive" is judged at the revision
// the records were read at (see the package doc). A compaction between the
// two reads (the revision is gone) restarts both, a few times; a page of a
// given revision cannot restart: it is authority.ErrListCompacted.
func (h *handlers) listAtOneRevision(ctx context.Context, opt authority.ListOptions, paged bool) (authority.Page, map[string]int64, error) {
	const attempts = 3
	var err error
	for range attempts {
		var p authority.Page
		if paged {
			p, err = h.st.ListPage(ctx, opt)
		} else {
			p.Snapshots, p.Revision, err = h.st.List(ctx, opt)
		}
		if err != nil {
			return authority.Page{}, nil, err
		}
		var resp *clientv3.GetResponse
		resp, err = h.cli.Get(ctx, h.s.keys.OwnersPrefix(), clientv3.WithPrefix(), clientv3.WithRev(p.Revision), clientv3.WithKeysOnly())
		if errors.Is(err, rpctypes.ErrCompacted) {
			if opt.Revision != 0 {
				return authority.Page{}, nil, fmt.Errorf("%w (owners at revision %d): %w", authority.ErrListCompacted, opt.Revision, err)
			}
			continue
		}
		if err != nil {
			return authority.Page{}, nil, fmt.Errorf("locationd: owners at revision %d: %w", p.Revision, err)
		}
		gens := make(map[string]int64, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			if id, perr := h.s.keys.ParseOwner(string(kv.Key)); perr == nil {
				gens[id] = kv.CreateRevision
			}
		}
		return p, gens, nil
	}
	return authority.Page{}, nil, fmt.Errorf("%w: revisions compacted during %d list attempts: %w", errUnavailable, attempts, err)
}

func alive(gens map[string]int64, o authority.OwnerRef) bool {
	g, ok := gens[o.ID]
	return ok && g != 0 && g == o.Generation
}

func objectJSON(s authority.Snapshot, alive bool) api.Object {
	return api.Object{Object: s.Object.String(), Record: s.Record, StoreVersion: s.StoreVersion, OwnerAlive: alive}
}

// objects lists records, filtered by kind, owner id, orphaned-ness and a
// part of the name. orphaned=true keeps the records whose owner key is
// absent or has another CreateRevision than record.owner.generation;
// orphaned=false keeps the others. With limit it answers one page (see
// api.ObjectsQuery): the objects after after, read at revision, and next
// when the listing goes on.
func (h *handlers) objects(ctx context.Context, r *http.Request) (any, error) {
	q, err := query(r, "kind", "owner", "orphaned", "contains", "limit", "after", "revision")
	if err != nil {
		return nil, err
	}
	opt := authority.ListOptions{Kind: q["kind"], Owner: q["owner"], Contains: q["contains"]}
	if _, given := q["kind"]; given && opt.Kind != keyspace.KindActor && opt.Kind != keyspace.KindGroup {
		return nil, fmt.Errorf("%w: kind %q (want actor or group)", errInvalidArgument, opt.Kind)
	}
	if _, given := q["owner"]; given {
		if err := keyspace.ValidateOwnerID(opt.Owner); err != nil {
			return nil, fmt.Errorf("%w: owner: %w", errInvalidArgument, err)
		}
	}
	orphaned, err := queryBool(q, "orphaned")
	if err != nil {
		return nil, err
	}
	if _, given := q["contains"]; given && (opt.Contains == "" || len(opt.Contains) > api.MaxContains) {
		return nil, fmt.Errorf("%w: contains: 1 to %d bytes", errInvalidArgument, api.MaxContains)
	}
	_, paged := q["limit"]
	if paged {
		if opt.Limit, err = strconv.Atoi(q["limit"]); err != nil || opt.Limit < 1 || opt.Limit > api.MaxObjectsLimit || q["limit"] != strconv.Itoa(opt.Limit) {
			return nil, fmt.Errorf("%w: limit %q (want 1..%d)", errInvalidArgument, q["limit"], api.MaxObjectsLimit)
		}
	}
	if v, given := q["after"]; given {
		if opt.After, err = keyspace.ParseObject(v); err != nil {
			return nil, fmt.Errorf("%w: after: %w", errInvalidArgument, err)
		}
	}
	if v, given := q["revision"]; given {
		if opt.Revision, err = strconv.ParseInt(v, 10, 64); err != nil || opt.Revision < 1 || v != strconv.FormatInt(opt.Revision, 10) {
			return nil, fmt.Errorf("%w: revision %q (want a positive integer)", errInvalidArgument, v)
		}
	}
	if !paged && (!opt.After.IsZero() || opt.Revision != 0) {
		return nil, fmt.Errorf("%w: after and revision page a listing: give limit too", errInvalidArgument)
	}
	p, gens, err := h.listAtOneRevision(ctx, opt, paged)
	if err != nil {
		return nil, err
	}
	out := api.ObjectsResponse{Revision: p.Revision, Objects: make([]api.Object, 0, len(p.Snapshots))}
	if !p.Next.IsZero() {
		out.Next = p.Next.String()
	}
	for _, s := range p.Snapshots {
		a := alive(gens, s.Record.Owner)
		// A sleeping object has no owner to be alive, and is no orphan.
		if orphaned != nil && *orphaned == (a || s.Record.Asleep()) {
			continue
		}
		out.Objects = append(out.Objects, objectJSON(s, a))
	}
	return out, nil
}

// object reads one record and judges its owner at the record's revision: it
// reads the record to learn the owner id, then record and owner key together
// in one transaction (ReadMany). If the owner id changed in between, it
// reads again, a few times.
func (h *handlers) object(ctx context.Context, r *http.Request) (any, error) {
	q, err := query(r, "history")
	if err != nil {
		return nil, err
	}
	obj, err := keyspace.ParseObject(r.PathValue("object"))
	if err != nil {
		return nil, err
	}
	history := 0
	if v, given := q["history"]; given {
		if history, err = strconv.Atoi(v); err != nil || history < 1 || history > api.MaxHistory {
			return nil, fmt.Errorf("%w: history %q (want 1..%d)", errInvalidArgument, v, api.MaxHistory)
		}
	}
	const attempts = 3
	for range attempts {
		first, err := h.st.Read(ctx, obj)
		if err != nil {
			return nil, err
		}
		id := first.Record.Owner.ID
		if err := keyspace.ValidateOwnerID(id); err != nil {
			return nil, fmt.Errorf("%w: %s has owner id %q: %w", authority.ErrInvalidRecord, obj, id, err)
		}
		v, err := h.st.ReadMany(ctx, []keyspace.Object{obj}, []string{id})
		if err != nil {
			return nil, err
		}
		snap, ok := v.Objects[obj.String()]
		if !ok {
			return nil, fmt.Errorf("%w: %s", authority.ErrNotFound, obj)
		}
		if snap.Record.Owner.ID != id {
			continue
		}
		out := api.ObjectResponse{Object: objectJSON(snap, v.Alive(snap.Record.Owner)), Revision: v.Revision}
		if history > 0 {
			if out.History, out.HistoryCompacted, err = h.history(ctx, obj, snap.StoreVersion, history); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %s changed owner during %d reads", errUnavailable, obj, attempts)
}
