package locationd

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/lease"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The event stream's sources, run by the hub while it has clients: one
// etcd watch of the owner keys and one of the authority keys (each change
// an "owner" or "record" event), and one AdminService.WatchEvents stream
// per live owner ("relocation", "stats" and "watch" events). An owner is
// watched at the address its key in etcd names, never at one a message
// names, and only while that key lives.

// Data of the owner and record events (docs/operating/monitoring.md, "Event stream"; the others
// are shapes of pkg/api).
type (
	ownerEvent struct {
		Kind     string     `json:"kind"` // put or delete
		ID       string     `json:"id"`
		Owner    *api.Owner `json:"owner,omitempty"`
		Revision int64      `json:"revision"`
	}
	recordEvent struct {
		Kind         string            `json:"kind"` // put or delete
		Object       string            `json:"object"`
		Record       *authority.Record `json:"record,omitempty"`
		StoreVersion int64             `json:"storeVersion,omitempty"`
		Revision     int64             `json:"revision"`
	}
)

// Retry bounds of the sources.
const (
	sourceRetryMin = 500 * time.Millisecond
	sourceRetryMax = 10 * time.Second
)

// eventSources is the hub's start function.
func (s *Server) eventSources(cli *clientv3.Client, pool *adminPool) func(context.Context, *eventHub) {
	return func(ctx context.Context, h *eventHub) {
		nw := &nodeWatchers{ctx: ctx, h: h, pool: pool, w: map[string]*nodeWatch{}}
		defer nw.stopAll()
		backoff := sourceRetryMin
		for ctx.Err() == nil {
			err := s.watchStore(ctx, h, cli, nw)
			if ctx.Err() != nil {
				return
			}
			s.log.Warn().Err(err).Dur("retryIn", backoff).Msg("event stream: etcd watch ended; listing again")
			h.publish(EventReset, "", api.Reset{Reason: "the etcd watch restarted: " + err.Error()})
			if !wait(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, sourceRetryMax)
		}
	}
}

// watchStore lists the owners (starting their watchers), then follows the
// owner and authority keys from that revision until the watch fails.
func (s *Server) watchStore(ctx context.Context, h *eventHub, cli *clientv3.Client, nw *nodeWatchers) error {
	owners, rev, err := lease.ListOwners(ctx, cli, s.keys)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, o := range owners {
		live[o.Descriptor.OwnerID] = true
		nw.upsert(o)
	}
	nw.retain(live)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ow := cli.Watch(wctx, s.keys.OwnersPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	aw := cli.Watch(wctx, s.keys.AuthorityPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-ow:
		case resp, ok = <-aw:
		}
		if !ok {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errors.New("watch closed")
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return errors.New("revisions compacted")
			}
			return err
		}
		for _, ev := range resp.Events {
			s.publishKey(h, nw, ev, resp.Header.Revision)
		}
	}
}

// publishKey turns one watched change into an event.
func (s *Server) publishKey(h *eventHub, nw *nodeWatchers, ev *clientv3.Event, rev int64) {
	key := string(ev.Kv.Key)
	del := ev.Type == mvccpb.DELETE
	kind := "put"
	if del {
		kind = "delete"
	}
	if strings.HasPrefix(key, s.keys.OwnersPrefix()) {
		id, err := s.keys.ParseOwner(key)
		if err != nil {
			return
		}
		out := ownerEvent{Kind: kind, ID: id, Revision: rev}
		if del {
			nw.remove(id)
		} else {
			d, err := lease.DecodeDescriptor(ev.Kv.Value)
			if err != nil {
				d = lease.Descriptor{OwnerID: id}
			}
			o := lease.Owner{Descriptor: d, Generation: ev.Kv.CreateRevision, ModRevision: ev.Kv.ModRevision, LeaseID: ev.Kv.Lease}
			j := ownerJSON(o)
			out.Owner = &j
			nw.upsert(o)
		}
		h.publish(EventOwner, "", out)
		return
	}
	obj, err := s.keys.ParseAuthority(key)
	if err != nil {
		return
	}
	out := recordEvent{Kind: kind, Object: obj.String(), Revision: rev}
	if !del {
		rec, err := authority.DecodeRecord(ev.Kv.Value)
		if err != nil {
			return // not a record meshloc wrote: nothing to show
		}
		out.Record, out.StoreVersion = &rec, ev.Kv.ModRevision
	}
	h.publish(EventRecord, out.Object, out)
}

// nodeWatchers are the WatchEvents streams of the live owners, by id.
type nodeWatchers struct {
	ctx  context.Context
	h    *eventHub
	pool *adminPool
	mu   sync.Mutex
	w    map[string]*nodeWatch
	wg   sync.WaitGroup
}

type nodeWatch struct {
	gen    int64
	addr   string
	cancel context.CancelFunc
}

// upsert watches o at the address its key names (again, if its generation
// or address changed).
func (nw *nodeWatchers) upsert(o lease.Owner) {
	id, addr := o.Descriptor.OwnerID, o.Descriptor.Address
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if w := nw.w[id]; w != nil {
		if w.gen == o.Generation && w.addr == addr {
			return
		}
		w.cancel()
		delete(nw.w, id)
	}
	if addr == "" || nw.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(nw.ctx)
	nw.w[id] = &nodeWatch{gen: o.Generation, addr: addr, cancel: cancel}
	nw.wg.Go(func() { nw.run(ctx, id, addr) })
}

func (nw *nodeWatchers) remove(id string) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if w := nw.w[id]; w != nil {
		w.cancel()
		delete(nw.w, id)
	}
	nw.h.forget(id)
}

// retain stops the watchers of owners not in live.
func (nw *nodeWatchers) retain(live map[string]bool) {
	nw.mu.Lock()
	var gone []string
	for id := range nw.w {
		if !live[id] {
			gone = append(gone, id)
		}
	}
	nw.mu.Unlock()
	for _, id := range gone {
		nw.remove(id)
	}
}

func (nw *nodeWatchers) stopAll() {
	nw.mu.Lock()
	for id, w := range nw.w {
		w.cancel()
		delete(nw.w, id)
	}
	nw.mu.Unlock()
	nw.wg.Wait()
}

// run follows one owner's WatchEvents until ctx ends, again after a
// break (a node that restarts comes back as another generation: upsert).
func (nw *nodeWatchers) run(ctx context.Context, id, addr string) {
	backoff := sourceRetryMin
	for ctx.Err() == nil {
		var prev *pb.NodeStats
		err := nw.pool.call(ctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
			st, err := c.WatchEvents(ctx, &pb.WatchEventsRequest{Version: 1})
			if err != nil {
				return err
			}
			for first := true; ; first = false {
				ev, err := st.Recv()
				if err != nil {
					return err
				}
				if first {
					nw.h.publishState(EventWatch, "", id, api.NodeWatch{Node: id, Address: addr, Connected: true})
					backoff = sourceRetryMin
				}
				switch x := ev.GetEvent().(type) {
				case *pb.NodeEvent_Relocation:
					r := relocationJSON(x.Relocation, id)
					nw.h.publish(EventRelocation, r.Object, r)
				case *pb.NodeEvent_Stats:
					nw.h.publishState(EventStats, "", id, statsOf(id, prev, x.Stats))
					prev = x.Stats
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		msg := err.Error()
		if st, ok := status.FromError(err); ok {
			msg = st.Code().String() + ": " + st.Message()
		}
		nw.h.publishState(EventWatch, "", id, api.NodeWatch{Node: id, Address: addr, Error: msg})
		if !wait(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, sourceRetryMax)
	}
}

// statsOf is a node's stats event, its call rate from the sample before.
func statsOf(id string, prev, st *pb.NodeStats) api.NodeStats {
	out := api.NodeStats{Node: id, UnixMs: st.GetUnixMs(), CallsTotal: st.GetCallsTotal(),
		HostedObjects: st.GetHostedObjects(), RelocationsInFlight: st.GetRelocationsInFlight()}
	if prev != nil && st.GetUnixMs() > prev.GetUnixMs() && st.GetCallsTotal() >= prev.GetCallsTotal() {
		out.CallsPerSecond = float64(st.GetCallsTotal()-prev.GetCallsTotal()) * 1000 / float64(st.GetUnixMs()-prev.GetUnixMs())
	}
	return out
}

// wait waits d, or until ctx ends (false).
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
