package authority

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/asleep"
	"github.com/meshloc/meshloc/internal/etcdscan"
	"github.com/meshloc/meshloc/internal/relist"
	"github.com/meshloc/meshloc/internal/shrink"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// Location is what the cache keeps per object (pkg/record).
type Location = record.Location

// LocationOf a snapshot.
func LocationOf(s Snapshot) Location { return record.LocationOf(s) }

// Cache is a location cache fed by an etcd watch on authority/. It only moves
// forward: an entry is replaced only by information of a larger revision,
// whether it comes from the watch, a re-list after compaction, or Observe
// (results of our own transactions, hints in replies).
type Cache struct {
	c    *clientv3.Client
	w    clientv3.Watcher // the watch path: c's own, or a fan-out's (WatchVia)
	keys keyspace.Keys
	now  func() time.Time

	mu       sync.RWMutex
	entries  map[string]cacheEntry     // cache_entry.go
	peak     shrink.Peak               // of entries: rebuilt once mostly asleep
	asleep   asleep.Set                // names seen asleep (they have no entry)
	groups   map[string]*record.Record // a group's whole record at its entry's version
	places   map[placement]*placed     // each placement in use, once (cache_entry.go)
	counts   map[string]int            // objects per owner id
	rev      int64                     // highest revision the cache is complete up to
	freshAt  time.Time                 // the cache holds every change committed before this (freshness.go)
	barriers []barrier                 // revisions etcd read at known times, not reached yet
	ready    chan struct{}
	readyOne sync.Once
	changed  chan struct{}   // closed and replaced whenever rev moves
	subs     []*Subscription // cache_subs.go
	offers   []string        // names changed under mu, offered to subs at unlock
}

// CacheOption configures a Cache at NewCache.
type CacheOption func(*Cache)

// WatchVia makes the cache follow etcd through w (a client of a watch
// fan-out, internal/fanout) instead of c: its watch and its progress
// requests go there, while its loads and freshness reads stay on c.
func WatchVia(w clientv3.Watcher) CacheOption { return func(c *Cache) { c.w = w } }

// NewCache returns a cache reading etcd through c; Run feeds it.
func NewCache(c *clientv3.Client, keys keyspace.Keys, opts ...CacheOption) *Cache {
	cache := &Cache{
		c: c, w: c, keys: keys, now: time.Now,
		entries: map[string]cacheEntry{}, groups: map[string]*record.Record{}, places: map[placement]*placed{}, counts: map[string]int{},
		ready: make(chan struct{}), changed: make(chan struct{}),
	}
	for _, o := range opts {
		o(cache)
	}
	return cache
}

// Ready is closed once the first full load is in.
func (c *Cache) Ready() <-chan struct{} { return c.ready }

// Revision the cache is complete up to.
func (c *Cache) Revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// FreshAt is a time before which every change of a record was committed
// is in the cache: the start of a load, or of a linearizable read of etcd's
// revision that the watch has since reached (freshness.go; docs/design.md
// §5: a gateway accepts replies only while this is within the lease TTL).
func (c *Cache) FreshAt() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.freshAt
}

// Len is the number of objects cached (tombstones excluded).
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, k := range c.counts {
		n += k
	}
	return n
}

// Count is the number of cached objects whose record names owner id (any
// generation): the load figure placement uses.
func (c *Cache) Count(ownerID string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.counts[ownerID]
}

// Lookup returns the cached location of obj.
func (c *Cache) Lookup(obj keyspace.Object) (Location, bool) {
	return c.LookupName(obj.String())
}

// LookupName is Lookup by canonical object name.
func (c *Cache) LookupName(name string) (Location, bool) {
	c.mu.RLock()
	e, ok := c.entries[name]
	c.mu.RUnlock()
	if !ok || e.deleted() {
		return Location{}, false
	}
	return e.location(), true
}

// Entry is what the cache knows of one object: its location, or that its
// record was deleted, as of Version (the revision of that information).
type Entry struct {
	Location Location
	Deleted  bool
	// Corrupt (with Deleted): the record exists but does not decode.
	Corrupt bool
	Version int64
}

// EntryOf returns what the cache knows of the object named name, tombstones
// included (false: nothing).
func (c *Cache) EntryOf(name string) (Entry, bool) {
	c.mu.RLock()
	e, ok := c.entries[name]
	c.mu.RUnlock()
	if !ok || e.deleted() {
		return Entry{Deleted: ok, Corrupt: ok && e.objGen == corruptMark, Version: e.version}, ok
	}
	return Entry{Location: e.location(), Version: e.version}, true
}

// MaybeAsleep reports whether the object named name may be asleep: its
// record was seen asleep (listed, watched or observed) since the cache
// started. False says it never was, so a name the cache does not hold
// either is new or was put to sleep in the last moments, before the
// watch told this cache. True may be wrong (a name seen asleep since
// woken or deleted; at most about 4 in 100 names never seen).
func (c *Cache) MaybeAsleep(name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.asleep.Maybe(name)
}

// Observe feeds a snapshot learnt elsewhere (a transaction's result). It is
// applied only if newer than what the cache holds; it reports whether it was.
func (c *Cache) Observe(s Snapshot) bool {
	c.mu.Lock()
	defer c.unlock()
	return c.applyLocked(s.Object.String(), LocationOf(s), false, s.StoreVersion, groupRecord(s.Object, s.Record))
}

// ObserveLocation is Observe for a location (at its store version).
func (c *Cache) ObserveLocation(obj keyspace.Object, loc Location) bool {
	c.mu.Lock()
	defer c.unlock()
	return c.applyLocked(obj.String(), loc, false, loc.StoreVersion, nil)
}

// Group is group name's whole record as the cache last saw it (the watch,
// a load, or Observe of a snapshot), at the cache's version of it; false
// when the cache holds none (unknown, deleted, or known by location only).
func (c *Cache) Group(name string) (Snapshot, bool) {
	c.mu.RLock()
	e, ok := c.entries[name]
	grp := c.groups[name]
	c.mu.RUnlock()
	if !ok || e.deleted() || grp == nil {
		return Snapshot{}, false
	}
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return Snapshot{}, false
	}
	r := *grp // a copy: callers plan records from it
	r.Members = slices.Clone(r.Members)
	if r.Intent != nil {
		in := *r.Intent
		r.Intent = &in
	}
	return Snapshot{Object: obj, Record: r, StoreVersion: e.version}, true
}

func (c *Cache) advanceLocked(rev int64) {
	if rev > c.rev {
		c.rev = rev
		close(c.changed)
		c.changed = make(chan struct{})
	}
	c.reachBarriersLocked()
}

// Changed returns a channel closed when the cache next advances.
func (c *Cache) Changed() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changed
}

// WaitRevision blocks until the cache is complete up to rev, or ctx ends.
func (c *Cache) WaitRevision(ctx context.Context, rev int64) error {
	for {
		c.mu.RLock()
		cur, ch := c.rev, c.changed
		c.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run loads the cache and follows the watch until ctx ends. A compacted
// watch re-lists at the current revision and resumes; the cache never goes
// backwards.
func (c *Cache) Run(ctx context.Context) error {
	return relist.Run(ctx, func(ctx context.Context) error {
		rev, err := c.load(ctx)
		if err != nil {
			return err
		}
		return c.follow(ctx, rev)
	})
}

// applyKVLocked applies a record as listed or watched. A record that does
// not decode is kept as a corrupt tombstone: to the owner of the object it
// is a record that no longer names it (docs/operating/security.md).
func (c *Cache) applyKVLocked(kv *mvccpb.KeyValue) {
	obj, err := c.keys.ParseAuthority(string(kv.Key))
	if err != nil {
		return
	}
	r, err := DecodeRecord(kv.Value)
	if err != nil {
		c.applyLocked(obj.String(), Location{}, true, kv.ModRevision, nil)
		if e := c.entries[obj.String()]; e.version == kv.ModRevision {
			e.objGen = corruptMark
			c.entries[obj.String()] = e
		}
		return
	}
	c.applyLocked(obj.String(), LocationOf(Snapshot{Object: obj, Record: r, StoreVersion: kv.ModRevision}), false, kv.ModRevision, groupRecord(obj, r))
}

// groupRecord is r to keep beside the location when obj is a group.
func groupRecord(obj keyspace.Object, r record.Record) *record.Record {
	if obj.Kind != keyspace.KindGroup {
		return nil
	}
	return &r
}

// load lists every record at one revision (chunk by chunk) and applies it.
func (c *Cache) load(ctx context.Context) (int64, error) {
	prefix := c.keys.AuthorityPrefix()
	// The list's revision holds every change committed before its first
	// (linearizable) read was sent.
	at := c.now()
	// A record deleted while the watch was down (a relist after an error)
	// is not in the list: the names listed are kept, when the cache held
	// any, so that those it still holds are deleted below.
	c.mu.Lock()
	var listed map[string]struct{}
	if len(c.entries) > 0 {
		listed = make(map[string]struct{}, len(c.entries))
	}
	c.mu.Unlock()
	rev, err := etcdscan.Range(ctx, c.c, prefix, clientv3.GetPrefixRangeEnd(prefix), 0, func(kvs []*mvccpb.KeyValue) error {
		c.mu.Lock()
		defer c.unlock()
		for _, kv := range kvs {
			c.applyKVLocked(kv)
			if listed != nil {
				if obj, err := c.keys.ParseAuthority(string(kv.Key)); err == nil {
					listed[obj.String()] = struct{}{}
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("authority: cache load: %w", err)
	}
	c.mu.Lock()
	if listed != nil {
		c.dropUnlistedLocked(listed, rev)
	}
	c.advanceLocked(rev)
	c.freshAt = later(c.freshAt, at)
	c.unlock() // offers the names dropped
	c.readyOne.Do(func() { close(c.ready) })
	return rev, nil
}

// dropUnlistedLocked deletes the entries of records absent from a list at
// rev that the cache learnt before rev: records deleted (meshctl delete,
// Context.Delete) while the watch was down. Their owners learn it as from
// a watched delete (subscribers are offered the names).
func (c *Cache) dropUnlistedLocked(listed map[string]struct{}, rev int64) {
	var gone []string
	for name, e := range c.entries {
		if _, ok := listed[name]; !ok && e.at != nil && e.version < rev {
			gone = append(gone, name)
		}
	}
	for _, name := range gone {
		c.applyLocked(name, Location{}, true, rev, nil)
	}
}

// follow watches from rev+1 until an error; ErrCompacted means re-list.
func (c *Cache) follow(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.w.Watch(wctx, c.keys.AuthorityPrefix(), clientv3.WithPrefix(),
		clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return err
		}
		c.mu.Lock()
		// A batch of events may be followed by more of a later revision
		// (a catching-up watcher), so only a progress notification vouches
		// for the header revision; an event batch for its last event.
		upTo := resp.Header.Revision
		if !resp.IsProgressNotify() && len(resp.Events) > 0 {
			upTo = resp.Events[len(resp.Events)-1].Kv.ModRevision
		}
		for _, ev := range resp.Events {
			switch ev.Type {
			case clientv3.EventTypePut:
				c.applyKVLocked(ev.Kv)
			case clientv3.EventTypeDelete:
				if obj, err := c.keys.ParseAuthority(string(ev.Kv.Key)); err == nil {
					c.applyLocked(obj.String(), Location{}, true, ev.Kv.ModRevision, nil)
				}
			}
		}
		c.advanceLocked(upTo)
		c.unlock()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("authority: cache watch closed")
}

// Keys is the key codec the cache watches under.
func (c *Cache) Keys() keyspace.Keys { return c.keys }
