package lease

import (
	"context"
	"fmt"
	"sort"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/relist"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Directory is a watch-fed view of the live owners (owners/ keys). An owner
// is alive while its key exists with the same CreateRevision (its generation);
// the directory never guesses liveness from time.
type Directory struct {
	c    *clientv3.Client
	w    clientv3.Watcher // the watch path: c's own, or a fan-out's (WatchVia)
	keys keyspace.Keys

	mu       sync.RWMutex
	owners   map[string]Owner
	rev      int64
	ready    chan struct{}
	readyOne sync.Once
	changed  chan struct{}
	tlsOnly  bool
}

// DirectoryOption configures a Directory at NewDirectory.
type DirectoryOption func(*Directory)

// WatchVia makes the directory follow owners/ through w (a client of a
// watch fan-out, internal/fanout); its loads stay on the etcd client.
func WatchVia(w clientv3.Watcher) DirectoryOption { return func(d *Directory) { d.w = w } }

// RequireTLS leaves out of the directory every owner whose descriptor does
// not say it serves mutual TLS: to a secured node such an owner does not
// exist (no call is routed to it, no object moved to it).
func RequireTLS() DirectoryOption { return func(d *Directory) { d.tlsOnly = true } }

// admits reports whether the directory lists an owner described by desc.
func (d *Directory) admits(desc Descriptor) bool { return !d.tlsOnly || desc.TLS }

// NewDirectory returns a directory reading etcd through c; Run feeds it.
func NewDirectory(c *clientv3.Client, keys keyspace.Keys, opts ...DirectoryOption) *Directory {
	d := &Directory{c: c, w: c, keys: keys, owners: map[string]Owner{}, ready: make(chan struct{}), changed: make(chan struct{})}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Ready is closed after the first full load.
func (d *Directory) Ready() <-chan struct{} { return d.ready }

// Lookup returns the live owner with that id.
func (d *Directory) Lookup(id string) (Owner, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	o, ok := d.owners[id]
	return o, ok
}

// Alive reports whether the owner (id, generation) is alive as far as the
// directory has seen.
func (d *Directory) Alive(id string, generation int64) bool {
	o, ok := d.Lookup(id)
	return ok && o.Generation == generation
}

// List returns the live owners sorted by id.
func (d *Directory) List() []Owner {
	d.mu.RLock()
	out := make([]Owner, 0, len(d.owners))
	for _, o := range d.owners {
		out = append(out, o)
	}
	d.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Descriptor.OwnerID < out[j].Descriptor.OwnerID })
	return out
}

// Revision the directory is complete up to.
func (d *Directory) Revision() int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.rev
}

// Changed returns a channel closed at the next change.
func (d *Directory) Changed() <-chan struct{} {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.changed
}

func (d *Directory) notifyLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// Run loads and follows owners/ until ctx ends, re-listing after compaction
// or a broken watch.
func (d *Directory) Run(ctx context.Context) error { return relist.Run(ctx, d.runOnce) }

func (d *Directory) runOnce(ctx context.Context) error {
	list, rev, err := ListOwners(ctx, d.c, d.keys)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.owners = make(map[string]Owner, len(list))
	for _, o := range list {
		if d.admits(o.Descriptor) {
			d.owners[o.Descriptor.OwnerID] = o
		}
	}
	d.rev = rev
	d.notifyLocked()
	d.mu.Unlock()
	d.readyOne.Do(func() { close(d.ready) })

	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range d.w.Watch(wctx, d.keys.OwnersPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		d.mu.Lock()
		for _, ev := range resp.Events {
			id, err := d.keys.ParseOwner(string(ev.Kv.Key))
			if err != nil {
				continue
			}
			if ev.Type == clientv3.EventTypeDelete {
				delete(d.owners, id)
				continue
			}
			desc, err := DecodeDescriptor(ev.Kv.Value)
			if err != nil {
				desc = Descriptor{OwnerID: id}
			}
			if !d.admits(desc) {
				delete(d.owners, id)
				continue
			}
			d.owners[id] = Owner{Descriptor: desc, Generation: ev.Kv.CreateRevision, ModRevision: ev.Kv.ModRevision, LeaseID: ev.Kv.Lease}
		}
		if n := len(resp.Events); n > 0 {
			d.rev = max(d.rev, resp.Events[n-1].Kv.ModRevision)
		}
		d.notifyLocked()
		d.mu.Unlock()
	}
	return ctx.Err()
}

// AwaitServing waits until the directory lists owner (id, generation) as
// serving: a node that has just advertised itself serving places new
// objects on itself only once its own directory has seen that, so it waits
// here before taking calls. It ends early with ctx (its cause) or when
// ended closes (the owner's lease is gone: it will never be seen serving).
func (d *Directory) AwaitServing(ctx context.Context, id string, generation int64, ended <-chan struct{}) error {
	for {
		changed := d.Changed() // before the look: no change is missed
		if o, ok := d.Lookup(id); ok && o.Generation == generation && o.Descriptor.State == StateServing {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ended:
			return fmt.Errorf("lease: owner %s ended before it was seen serving", id)
		}
	}
}

// ServingIDs are the ids of the owners in os that serve.
func ServingIDs(os []Owner) []string {
	var ids []string
	for _, o := range os {
		if o.Descriptor.State == StateServing {
			ids = append(ids, o.Descriptor.OwnerID)
		}
	}
	return ids
}
