package authority

import (
	"github.com/meshloc/meshloc/internal/shrink"
	"github.com/meshloc/meshloc/pkg/record"
)

// A cache entry is small because every node keeps one per object of the
// cluster (a million records: the bound is 300 MiB for the whole
// joining process). What many objects share — the owner and its node,
// the same for every object of one owner's incarnation — is kept once, in
// a placement that the entries point to; the store version is the entry's
// version (they are equal for a record that exists); a group's whole
// record, rare, lives in a map of its own (Cache.groups).

// placement is an owner and the node it serves from.
type placement struct {
	owner OwnerRef
	node  NodeRef
}

// placed is an interned placement and the number of entries that point to
// it: the intern table holds only placements in use, however many owners
// came and went.
type placed struct {
	placement
	refs int
}

// cacheEntry is what the cache keeps of one object: 32 bytes. A record's
// authority-owner generation is always positive (Record.Validate), so the
// entry keeps it negated while the record is relocating instead of a flag
// that would cost 8 bytes of padding.
type cacheEntry struct {
	at       *placed // nil: a tombstone (the record was deleted at version)
	objGen   int64
	ownerGen int64 // negative: relocating
	version  int64 // revision of the newest information (mod revision or delete revision)
}

func (e cacheEntry) deleted() bool { return e.at == nil }

// corruptMark, as a tombstone's object generation, says the record exists
// but does not decode (a tombstone has no generation of its own).
const corruptMark = -1

// location rebuilds the entry's Location.
func (e cacheEntry) location() Location {
	return Location{
		Owner: e.at.owner, Node: e.at.node, ObjectGeneration: e.objGen, AuthorityGeneration: max(e.ownerGen, -e.ownerGen),
		StoreVersion: e.version, Relocating: e.ownerGen < 0,
	}
}

// applyLocked applies information of revision version; it reports whether the
// entry changed. Older or equal information is ignored (forward only).
//
// A sleeping object's location (it names no owner) removes the entry: a
// node keeps nothing of the objects asleep, however many there are, and a
// lookup finds no owner, as for a sleeping record. What is lost is the
// version of the removal, so a snapshot older than the sleep, observed
// after it, brings back the location it had before: a call routed there
// finds it not hosted and its retry reads etcd again (Refresh).
func (c *Cache) applyLocked(name string, loc Location, deleted bool, version int64, grp *record.Record) bool {
	e, ok := c.entries[name]
	if ok && e.version >= version {
		return false
	}
	if !deleted && loc.Asleep() {
		c.asleep.Add(name)
		if !ok {
			return false
		}
		if e.at != nil {
			c.release(e.at)
		}
		delete(c.entries, name)
		c.entries = shrink.Deleted(c.entries, &c.peak)
		if len(c.groups) > 0 {
			delete(c.groups, name)
		}
		if len(c.subs) > 0 {
			c.offers = append(c.offers, name)
		}
		return true
	}
	if ok && e.at != nil {
		c.release(e.at)
	}
	n := cacheEntry{version: version}
	if !deleted {
		gen := max(loc.AuthorityGeneration, -loc.AuthorityGeneration) // a location from a valid record: positive
		if loc.Relocating {
			gen = -gen
		}
		n = cacheEntry{at: c.hold(placement{owner: loc.Owner, node: loc.Node}), objGen: loc.ObjectGeneration,
			ownerGen: gen, version: version}
	}
	c.entries[name] = n
	if grp != nil && !deleted {
		c.groups[name] = grp
	} else if len(c.groups) > 0 {
		delete(c.groups, name)
	}
	if len(c.subs) > 0 {
		c.offers = append(c.offers, name)
	}
	return true
}

// hold returns the interned p with one more reference, and counts the
// object for its owner.
func (c *Cache) hold(p placement) *placed {
	at := c.places[p]
	if at == nil {
		at = &placed{placement: p}
		c.places[p] = at
	}
	at.refs++
	c.counts[at.owner.ID]++
	return at
}

// release drops one reference of at (and the object from its owner's count).
func (c *Cache) release(at *placed) {
	if c.counts[at.owner.ID]--; c.counts[at.owner.ID] <= 0 {
		delete(c.counts, at.owner.ID)
	}
	if at.refs--; at.refs <= 0 {
		delete(c.places, at.placement)
	}
}
