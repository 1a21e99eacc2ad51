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

	"github.com/meshloc/meshloc/internal/relist"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// Location is what the cache keeps per object (pkg/record).
type Location = record.Location

// LocationOf a snapshot.
func LocationOf(s Snapshot) Location { return record.LocationOf(s) }

type cacheEntry struct {
	loc     Location
	deleted bool  // a tombstone: the key was deleted at loc.StoreVersion
	version int64 // revision of the newest information (mod revision or delete revision)
	// group is a group's whole record at version (nil for actors, and when
	// only a location was observed): a group relocation plans from it.
	group *record.Record
}

// Cache is a location cache fed by an etcd watch on authority/. It only moves
// forward: an entry is replaced only by information of a larger revision,
// whether it comes from the watch, a re-list after compaction, or Observe
// (results of our own transactions, hints in replies).
type Cache struct {
	c    *clientv3.Client
	keys keyspace.Keys
	now  func() time.Time

	mu       sync.RWMutex
	entries  map[string]cacheEntry
	intern   map[string]string
	counts   map[string]int // objects per owner id
	rev      int64          // highest revision the cache is complete up to
	freshAt  time.Time      // when the cache was last known current (load, event or progress)
	ready    chan struct{}
	readyOne sync.Once
	changed  chan struct{} // closed and replaced whenever rev moves
	subs     []*Subscription
}

// Subscription collects the names of the entries the cache changed (from
// the watch, a load or Observe), each name once until taken: its owner
// reads the current location with Lookup. It never blocks the cache and
// holds at most one name per object.
type Subscription struct {
	c       *Cache
	ready   chan struct{} // a token when names are pending
	mu      sync.Mutex
	pending map[string]struct{}
}

// Subscribe starts collecting changed names; Unsubscribe stops it.
func (c *Cache) Subscribe() *Subscription {
	s := &Subscription{c: c, ready: make(chan struct{}, 1), pending: map[string]struct{}{}}
	c.mu.Lock()
	c.subs = append(c.subs, s)
	c.mu.Unlock()
	return s
}

// Unsubscribe stops s collecting.
func (c *Cache) Unsubscribe(s *Subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.subs {
		if x == s {
			c.subs = append(c.subs[:i], c.subs[i+1:]...)
			return
		}
	}
}

// Ready has a token whenever names are pending.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Take returns the pending names (in no order) and forgets them.
func (s *Subscription) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.pending))
	for k := range s.pending {
		out = append(out, k)
	}
	clear(s.pending)
	return out
}

func (s *Subscription) add(name string) {
	s.mu.Lock()
	s.pending[name] = struct{}{}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// NewCache returns a cache; Run feeds it.
func NewCache(c *clientv3.Client, keys keyspace.Keys) *Cache {
	return &Cache{
		c: c, keys: keys, now: time.Now,
		entries: map[string]cacheEntry{}, intern: map[string]string{}, counts: map[string]int{},
		ready: make(chan struct{}), changed: make(chan struct{}),
	}
}

// Ready is closed once the first full load is in.
func (c *Cache) Ready() <-chan struct{} { return c.ready }

// Revision the cache is complete up to.
func (c *Cache) Revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// FreshAt is when the cache was last known current: the end of a load, a
// watch event or a progress notification (docs/design.md §5: a gateway accepts
// replies only while this is within the lease TTL).
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
	if !ok || e.deleted {
		return Location{}, false
	}
	return e.loc, true
}

// Entry is what the cache knows of one object: its location, or that its
// record was deleted, as of Version (the revision of that information).
type Entry struct {
	Location Location
	Deleted  bool
	Version  int64
}

// EntryOf returns what the cache knows of the object named name, tombstones
// included (false: nothing).
func (c *Cache) EntryOf(name string) (Entry, bool) {
	c.mu.RLock()
	e, ok := c.entries[name]
	c.mu.RUnlock()
	return Entry{Location: e.loc, Deleted: e.deleted, Version: e.version}, ok
}

func (c *Cache) internStr(s string) string {
	if v, ok := c.intern[s]; ok {
		return v
	}
	c.intern[s] = s
	return s
}

// applyLocked applies information of revision version; it reports whether the
// entry changed. Older or equal information is ignored (forward only).
func (c *Cache) applyLocked(name string, loc Location, deleted bool, version int64, grp *record.Record) bool {
	e, ok := c.entries[name]
	if ok && e.version >= version {
		return false
	}
	if ok && !e.deleted {
		c.counts[e.loc.Owner.ID]--
		if c.counts[e.loc.Owner.ID] <= 0 {
			delete(c.counts, e.loc.Owner.ID)
		}
	}
	if !deleted {
		c.counts[c.internStr(loc.Owner.ID)]++
	}
	loc.Owner.ID = c.internStr(loc.Owner.ID)
	loc.Node.Address = c.internStr(loc.Node.Address)
	loc.Node.RoutingID = c.internStr(loc.Node.RoutingID)
	c.entries[name] = cacheEntry{loc: loc, deleted: deleted, version: version, group: grp}
	for _, s := range c.subs {
		s.add(name)
	}
	return true
}

// Observe feeds a snapshot learnt elsewhere (a transaction's result). It is
// applied only if newer than what the cache holds; it reports whether it was.
func (c *Cache) Observe(s Snapshot) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applyLocked(s.Object.String(), LocationOf(s), false, s.StoreVersion, groupRecord(s.Object, s.Record))
}

// ObserveLocation is Observe for a location (at its store version).
func (c *Cache) ObserveLocation(obj keyspace.Object, loc Location) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applyLocked(obj.String(), loc, false, loc.StoreVersion, nil)
}

// Group is group name's whole record as the cache last saw it (the watch,
// a load, or Observe of a snapshot), at the cache's version of it; false
// when the cache holds none (unknown, deleted, or known by location only).
func (c *Cache) Group(name string) (Snapshot, bool) {
	c.mu.RLock()
	e, ok := c.entries[name]
	c.mu.RUnlock()
	if !ok || e.deleted || e.group == nil {
		return Snapshot{}, false
	}
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return Snapshot{}, false
	}
	r := *e.group // a copy: callers plan records from it
	r.Members = slices.Clone(r.Members)
	if r.Intent != nil {
		in := *r.Intent
		r.Intent = &in
	}
	return Snapshot{Object: obj, Record: r, StoreVersion: e.version}, true
}

func (c *Cache) advanceLocked(rev int64, fresh bool) {
	if fresh {
		c.freshAt = c.now()
	}
	if rev > c.rev {
		c.rev = rev
		close(c.changed)
		c.changed = make(chan struct{})
	}
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

func (c *Cache) decode(kv *mvccpb.KeyValue) (string, Location, *record.Record, bool) {
	obj, err := c.keys.ParseAuthority(string(kv.Key))
	if err != nil {
		return "", Location{}, nil, false
	}
	r, err := DecodeRecord(kv.Value)
	if err != nil {
		return "", Location{}, nil, false
	}
	return obj.String(), LocationOf(Snapshot{Object: obj, Record: r, StoreVersion: kv.ModRevision}), groupRecord(obj, r), true
}

// groupRecord is r to keep beside the location when obj is a group.
func groupRecord(obj keyspace.Object, r record.Record) *record.Record {
	if obj.Kind != keyspace.KindGroup {
		return nil
	}
	return &r
}

// load lists every record at one revision (paged) and applies it.
func (c *Cache) load(ctx context.Context) (int64, error) {
	prefix := c.keys.AuthorityPrefix()
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(5000)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.c.Get(ctx, key, opts...)
		if err != nil {
			return 0, fmt.Errorf("authority: cache load: %w", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		c.mu.Lock()
		for _, kv := range resp.Kvs {
			if name, loc, grp, ok := c.decode(kv); ok {
				c.applyLocked(name, loc, false, kv.ModRevision, grp)
			}
		}
		c.mu.Unlock()
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	// A key deleted while we were not watching is not in the list: a known
	// entry older than rev that is absent from etcd now stays until an event
	// or Observe replaces it. Authority records are durable and never deleted
	// by meshloc, so this only matters for operator deletions.
	c.mu.Lock()
	c.advanceLocked(rev, true)
	c.mu.Unlock()
	c.readyOne.Do(func() { close(c.ready) })
	return rev, nil
}

// KeepFresh asks etcd for a progress notification on the cache's watch
// every interval until ctx ends, so FreshAt stays recent while no record
// changes (etcd's own notifications of an idle watch come every ten
// minutes by default). A request that fails is simply made again at the
// next interval: a cache that cannot hear from etcd must go stale.
func (c *Cache) KeepFresh(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// The same metadata as the watch's context: the request goes
			// on the watch's stream.
			rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), every)
			_ = c.c.RequestProgress(rctx)
			cancel()
		}
	}
}

// follow watches from rev+1 until an error; ErrCompacted means re-list.
func (c *Cache) follow(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.c.Watch(wctx, c.keys.AuthorityPrefix(), clientv3.WithPrefix(),
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
				if name, loc, grp, ok := c.decode(ev.Kv); ok {
					c.applyLocked(name, loc, false, ev.Kv.ModRevision, grp)
				}
			case clientv3.EventTypeDelete:
				if obj, err := c.keys.ParseAuthority(string(ev.Kv.Key)); err == nil {
					c.applyLocked(obj.String(), Location{}, true, ev.Kv.ModRevision, nil)
				}
			}
		}
		c.advanceLocked(upTo, true)
		c.mu.Unlock()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("authority: cache watch closed")
}

// Keys is the key codec the cache watches under.
func (c *Cache) Keys() keyspace.Keys { return c.keys }
