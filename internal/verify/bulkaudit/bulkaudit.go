// Package bulkaudit is the etcd audit's index of the bulk intents etcd
// holds (relocations/<bulk id>, the one-write rule of docs/design.md §4):
// under that rule a commit goes from a record that carries no intent, and
// is right only if a bulk intent held then names the object at the store
// version the commit went from, the commit's target and its relocation.
package bulkaudit

import (
	"strings"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// Index is the bulk intents etcd holds, by object.
type Index struct {
	keys     keyspace.Keys
	byID     map[string]record.BulkIntent
	byObject map[string]map[string]record.BulkUnit // object → bulk id → its unit
}

// New returns an empty index of keys' relocations/.
func New(keys keyspace.Keys) *Index {
	return &Index{keys: keys, byID: map[string]record.BulkIntent{}, byObject: map[string]map[string]record.BulkUnit{}}
}

// Apply takes one put (or delete) of key; it reports whether key is
// under relocations/ (a bulk intent, its fence, or a single relocation's
// listing: only bulk intents are indexed).
func (x *Index) Apply(key string, value []byte, deleted bool) bool {
	prefix := x.keys.RelocationsPrefix()
	if !strings.HasPrefix(key, prefix) {
		return false
	}
	id := strings.TrimPrefix(key, prefix)
	if old, ok := x.byID[id]; ok {
		for _, u := range old.Units {
			delete(x.byObject[u.Object], id)
		}
		delete(x.byID, id)
	}
	if deleted {
		return true
	}
	in, found, err := record.DecodeBulkIntent(value, 1<<16)
	if err != nil || !found {
		return true
	}
	x.byID[id] = in
	for _, u := range in.Units {
		if x.byObject[u.Object] == nil {
			x.byObject[u.Object] = map[string]record.BulkUnit{}
		}
		x.byObject[u.Object][id] = u
	}
	return true
}

// Intended reports whether a bulk intent held now names obj moving, from
// the record at store version from, to the owner and under the
// relocation that rec, its commit, names.
func (x *Index) Intended(obj string, from int64, rec record.Record) bool {
	for id, u := range x.byObject[obj] {
		if u.StoreVersion == from && u.RelocationID == rec.LastRelocation && x.byID[id].Target == rec.Owner {
			return true
		}
	}
	return false
}
