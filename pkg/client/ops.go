package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/record"
)

// Operating the cluster: everything but calls goes through locationd's
// HTTP API (Config.Locationd), with the types of pkg/api. Errors are
// *api.Error (compare with errors.Is(err, api.ErrConflict), ...).

// ErrNoLocationd: an operation that needs locationd on a client without
// Config.Locationd.
var ErrNoLocationd = errors.New("client: no locationd address (Config.Locationd)")

// ErrNoEtcd: Watch on a client without etcd.
var ErrNoEtcd = errors.New("client: no etcd (Config.EtcdEndpoints or Etcd)")

// newAdmin is the HTTP client of Config.Locationd, with the client's TLS
// identity when it has one.
func newAdmin(cfg Config, tls *mtls.Reloader) (*Admin, error) {
	hc := cfg.HTTPClient
	if hc == nil && tls != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tls.ClientConfig(mtls.WantRole(mtls.RoleLocationd))}}
	}
	return NewAdmin(cfg.Locationd, hc)
}

// Admin is the client's HTTP client of locationd, for what it does not
// wrap (raw answers, Ready, Controllers); nil without Config.Locationd.
func (c *Client) Admin() *Admin { return c.admin }

func (c *Client) needAdmin() error {
	if c.admin == nil {
		return ErrNoLocationd
	}
	return nil
}

// RelocateOptions of Relocate.
type RelocateOptions struct {
	// Target owner id; empty: the owner's placement chooses.
	Target string
	// Timeout is the relocation's deadline from its start (0: locationd's
	// default; at most api.MaxRelocationTimeoutMs).
	Timeout time.Duration
	// Foreground: the owner starts it at once, however slow its calls
	// (api.RelocateRequest.Foreground).
	Foreground bool
	// NoPrecopy: the sealed state moves whole, without a pre-copy
	// (api.RelocateRequest.NoPrecopy; node.RelocateOptions.NoPrecopy).
	NoPrecopy bool
	// Detach: Relocate answers once the owner took the relocation (its id)
	// and it runs on, as node.RelocateOptions.Detach; false waits for its
	// end. Relocate returns the id either way; Wait and Relocation follow it.
	Detach bool
}

// Relocate moves object to another node and returns the relocation's id:
// once it ended, or at once with opts.Detach; Wait follows it to its
// outcome, Relocation reads where it is.
func (c *Client) Relocate(ctx context.Context, object string, opts RelocateOptions) (string, error) {
	if err := c.needAdmin(); err != nil {
		return "", err
	}
	wait := !opts.Detach
	r, _, err := c.admin.Relocate(ctx, api.RelocateRequest{Object: object, Target: opts.Target, TimeoutMs: opts.Timeout.Milliseconds(),
		Wait: &wait, Foreground: opts.Foreground, NoPrecopy: opts.NoPrecopy})
	if err != nil {
		return "", err
	}
	return r.RelocationID, nil
}

// Relocation is relocation id as its source reports it: in flight (an
// empty Outcome) or ended.
func (c *Client) Relocation(ctx context.Context, id string) (api.Relocation, error) {
	if err := c.needAdmin(); err != nil {
		return api.Relocation{}, err
	}
	r, _, err := c.admin.Relocation(ctx, id)
	return r, err
}

// waitPoll bounds how often Wait asks.
const (
	waitFirst = 20 * time.Millisecond
	waitMax   = 500 * time.Millisecond
)

// Wait returns relocation id once it ended (its Outcome: completed,
// aborted, failed, shutdown), or ctx's error. It asks locationd, more
// rarely as time passes.
func (c *Client) Wait(ctx context.Context, id string) (api.Relocation, error) {
	d := waitFirst
	for {
		r, err := c.Relocation(ctx, id)
		switch {
		case err == nil && !r.InFlight():
			return r, nil
		case err != nil && !errors.Is(err, api.ErrUnavailable):
			return r, err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return r, ctx.Err()
		case <-t.C:
		}
		d = min(2*d, waitMax)
	}
}

// Relocations lists the relocations every live node reports (q filters).
func (c *Client) Relocations(ctx context.Context, q api.RelocationsQuery) (api.RelocationsResponse, error) {
	if err := c.needAdmin(); err != nil {
		return api.RelocationsResponse{}, err
	}
	r, _, err := c.admin.Relocations(ctx, q)
	return r, err
}

// Drain moves every object of owner away and returns its report; progress,
// if set, gets every event as it happens. The node stops afterwards unless
// req.StopAfter is false.
func (c *Client) Drain(ctx context.Context, owner string, req api.DrainRequest, progress func(api.DrainEvent)) (api.DrainReport, error) {
	if err := c.needAdmin(); err != nil {
		return api.DrainReport{}, err
	}
	var f func(api.DrainEvent, []byte)
	if progress != nil {
		f = func(ev api.DrainEvent, _ []byte) { progress(ev) }
	}
	return c.admin.Drain(ctx, owner, req, f)
}

// Owners lists the live owners (nodes).
func (c *Client) Owners(ctx context.Context) ([]api.Owner, error) {
	if err := c.needAdmin(); err != nil {
		return nil, err
	}
	r, _, err := c.admin.Owners(ctx)
	return r.Owners, err
}

// Objects lists authority records (q filters; its Limit and Continue page).
func (c *Client) Objects(ctx context.Context, q api.ObjectsQuery) (api.ObjectsResponse, error) {
	if err := c.needAdmin(); err != nil {
		return api.ObjectsResponse{}, err
	}
	r, _, err := c.admin.Objects(ctx, q)
	return r, err
}

// Get reads one object's record and owner, e.g. "actor/counter/c1".
func (c *Client) Get(ctx context.Context, object string) (api.ObjectResponse, error) {
	if err := c.needAdmin(); err != nil {
		return api.ObjectResponse{}, err
	}
	r, _, err := c.admin.Object(ctx, object)
	return r, err
}

// RebalancePlan is the rebalancer's plan now, moving nothing (budget 0:
// the default).
func (c *Client) RebalancePlan(ctx context.Context, budget int) (api.RebalancePlan, error) {
	if err := c.needAdmin(); err != nil {
		return api.RebalancePlan{}, err
	}
	r, _, err := c.admin.RebalancePlanOf(ctx, budget)
	return r, err
}

// Rebalance makes a plan and runs it (req.DryRun: only makes it).
func (c *Client) Rebalance(ctx context.Context, req api.RebalanceRequest) (api.RebalancePlan, error) {
	if err := c.needAdmin(); err != nil {
		return api.RebalancePlan{}, err
	}
	r, _, err := c.admin.Rebalance(ctx, req)
	return r, err
}

// CreateGroup creates a group (req.On: on that node; else placement's).
func (c *Client) CreateGroup(ctx context.Context, req api.GroupRequest) (api.Group, error) {
	return c.group(ctx, req, (*Admin).CreateGroup)
}

// JoinGroup makes req.Actor a member of req.Group (it moves to the group's
// node if it lives elsewhere).
func (c *Client) JoinGroup(ctx context.Context, req api.GroupRequest) (api.Group, error) {
	return c.group(ctx, req, (*Admin).JoinGroup)
}

// LeaveGroup removes req.Actor from req.Group.
func (c *Client) LeaveGroup(ctx context.Context, req api.GroupRequest) (api.Group, error) {
	return c.group(ctx, req, (*Admin).LeaveGroup)
}

func (c *Client) group(ctx context.Context, req api.GroupRequest, op func(*Admin, context.Context, api.GroupRequest) (api.Group, []byte, error)) (api.Group, error) {
	if err := c.needAdmin(); err != nil {
		return api.Group{}, err
	}
	g, _, err := op(c.admin, ctx, req)
	return g, err
}

// Group reads a group and its members, e.g. "group/g1".
func (c *Client) Group(ctx context.Context, name string) (api.Group, error) {
	if err := c.needAdmin(); err != nil {
		return api.Group{}, err
	}
	g, _, err := c.admin.Group(ctx, name)
	return g, err
}

// RecordEvent is one change of an object's authority record.
type RecordEvent struct {
	// Record is the record now; Deleted: there is none.
	Record  record.Record
	Deleted bool
	// StoreVersion is the etcd revision of the change.
	StoreVersion int64
	// Err, on the last event: the watch ended (ctx's error, or etcd's).
	Err error
}

// Watch follows object's authority record in etcd: the record now first
// (or Deleted), then every change, in order, until ctx ends; the channel
// is closed after an event with Err. It needs etcd (Config.EtcdEndpoints
// or Etcd).
func (c *Client) Watch(ctx context.Context, object string) (<-chan RecordEvent, error) {
	if c.etcd == nil {
		return nil, ErrNoEtcd
	}
	obj, err := keyspace.ParseObject(object)
	if err != nil {
		return nil, err
	}
	st := authority.New(c.etcd, c.keys)
	cur, err := st.Read(ctx, obj)
	first := RecordEvent{Record: cur.Record, StoreVersion: cur.StoreVersion}
	rev := cur.Revision
	switch {
	case errors.Is(err, authority.ErrNotFound):
		first = RecordEvent{Deleted: true}
		if rev, err = c.revision(ctx, obj); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	out := make(chan RecordEvent, 16)
	c.wg.Go(func() {
		defer close(out)
		send := func(ev RecordEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			case <-c.bg.Done():
				return false
			}
		}
		if !send(first) {
			return
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		defer context.AfterFunc(c.bg, cancel)() // Close ends it too
		for resp := range c.etcd.Watch(wctx, c.keys.Authority(obj), clientv3.WithRev(rev+1)) {
			if err := resp.Err(); err != nil {
				send(RecordEvent{Err: err})
				return
			}
			for _, e := range resp.Events {
				ev := RecordEvent{StoreVersion: e.Kv.ModRevision, Deleted: e.Type == clientv3.EventTypeDelete}
				if !ev.Deleted {
					if ev.Record, err = record.DecodeRecord(e.Kv.Value); err != nil {
						send(RecordEvent{Err: fmt.Errorf("client: watch %s: %w", obj, err)})
						return
					}
				}
				if !send(ev) {
					return
				}
			}
		}
		send(RecordEvent{Err: ctx.Err()})
	})
	return out, nil
}

// revision is etcd's current revision.
func (c *Client) revision(ctx context.Context, obj keyspace.Object) (int64, error) {
	r, err := c.etcd.Get(ctx, c.keys.Authority(obj), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return r.Header.Revision, nil
}
