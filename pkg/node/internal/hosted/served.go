package hosted

import (
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/record"
)

// The record an object serves under, kept small. A relocation plans from
// the record its object serves under instead of reading etcd (recordOf);
// keeping every object's whole snapshot for that cost 256 bytes an object,
// a quarter of an idle object's memory. Almost every record an object
// serves under is the standard one — this node's owner pair, node and
// address, the object's own kind and type, active, no group, not pinned —
// so what is kept is what is not already known (the store version and
// revision, the relocation that wrote it) and the whole snapshot only for a
// record that is anything else. The standard form is checked field by
// field when the record is taken, so the plan is exactly the record.

// servedRec is the compact form of the record h serves under.
type servedRec struct {
	version  int64 // the snapshot's store version (0: none taken)
	revision int64
	last     string              // its LastRelocation
	full     *authority.Snapshot // the whole snapshot, when it is not standard
}

// standardRecord is the record h serves under at fence f when it is
// standard, with LastRelocation last.
func (h *Object) standardRecord(f authority.Fence, last string) record.Record {
	return record.Record{
		Kind: h.obj.Kind, Type: h.obj.Type, ObjectGeneration: f.ObjectGeneration, AuthorityGeneration: f.AuthorityGeneration,
		Owner: f.Owner, Node: h.env.selfNode, State: record.StateActive, LastRelocation: last,
	}
}

// CompactRecord is snap in its compact form for h.
func (h *Object) CompactRecord(snap authority.Snapshot) servedRec {
	c := servedRec{version: snap.StoreVersion, revision: snap.Revision, last: snap.Record.LastRelocation}
	if snap.Object != h.obj || !sameRecord(snap.Record, h.standardRecord(snap.Fence(), snap.Record.LastRelocation)) {
		c.full = &snap
	}
	return c
}

// Snapshot is the record c stands for, whole.
func (c servedRec) Snapshot(h *Object) authority.Snapshot {
	if c.full != nil {
		return *c.full
	}
	return authority.Snapshot{
		Object: h.obj, Record: h.standardRecord(h.Fence, c.last), StoreVersion: c.version, Revision: c.revision,
	}
}

// sameRecord reports whether a and b are equal in every field. A record
// with an intent or members is never standard, so those two are compared
// as absent; TestSameRecordFields fails when Record gains a field this
// does not compare.
func sameRecord(a, b record.Record) bool {
	return a.Intent == nil && b.Intent == nil && a.Members == nil && b.Members == nil &&
		a.Kind == b.Kind && a.Type == b.Type && a.ObjectGeneration == b.ObjectGeneration &&
		a.AuthorityGeneration == b.AuthorityGeneration && a.Owner == b.Owner && a.Node == b.Node &&
		a.State == b.State && a.Group == b.Group && a.Pinned == b.Pinned && a.LastRelocation == b.LastRelocation &&
		a.Deleted == b.Deleted && a.DeletedAtMs == b.DeletedAtMs
}
