// Package keyspace is the codec of meshloc's etcd layout (design.md §2): object
// names and the keys under /<prefix>/<cluster>/. It is the only place that
// builds or parses a key; every other package asks it.
//
//	owners/<ownerId>            lease-bound owner descriptor (its CreateRevision is the owner generation)
//	authority/<object>          authority record (durable)
//	relocations/<relocationId>  relocation intent (bound to the source's lease)
//	relocations/<bulkId>        a bulk's intents under the one-write rule (no lease)
//	relocations/<bulkId>/fence  its fence: each commit of the bulk compares its ModRevision
//	catalog/<object>            last object generation
//	state/<object>              state of a durable object
//	state/<object>/replies/<op> a persisted reply of a durable object
//	controllers/<name>/<lease>  election candidates of a controller (bound to each candidate's lease)
//	security                    the cluster's security policy (written by locationd when secured)
//
// where <object> is actor/<type>/<id> or group/<id>.
package keyspace

import (
	"fmt"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
	"strings"
)

// ErrInvalidName is returned for an object name, owner id or key that does not
// follow the layout.
var ErrInvalidName = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "keyspace: invalid name")

// Kinds of object.
const (
	KindActor = "actor"
	KindGroup = "group"
)

// MaxSegment bounds one name segment (type, id, owner id) in bytes.
const MaxSegment = 256

// Object names an addressable object: actor/<type>/<id> or group/<id>.
type Object struct {
	Kind string // KindActor or KindGroup
	Type string // the actor type; empty for a group
	ID   string
}

// String is the canonical name, e.g. "actor/counter/c1".
func (o Object) String() string {
	if o.Kind == KindGroup {
		return KindGroup + "/" + o.ID
	}
	return o.Kind + "/" + o.Type + "/" + o.ID
}

// IsZero reports whether o is the zero Object.
func (o Object) IsZero() bool { return o == Object{} }

func validSegment(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidName, what)
	}
	if len(s) > MaxSegment {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalidName, what, MaxSegment)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '@'
		if !ok {
			return fmt.Errorf("%w: %s %q has byte %q (allowed: letters, digits, - _ . : @)", ErrInvalidName, what, s, c)
		}
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%w: %s %q", ErrInvalidName, what, s)
	}
	return nil
}

// ValidateOwnerID checks an owner id (a node name).
func ValidateOwnerID(id string) error { return validSegment("owner id", id) }

// Validate checks every segment of o.
func (o Object) Validate() error {
	switch o.Kind {
	case KindActor:
		if err := validSegment("type", o.Type); err != nil {
			return err
		}
	case KindGroup:
		if o.Type != "" {
			return fmt.Errorf("%w: a group has no type", ErrInvalidName)
		}
	default:
		return fmt.Errorf("%w: unknown object kind %q (want actor or group)", ErrInvalidName, o.Kind)
	}
	return validSegment("id", o.ID)
}

// ParseObject parses "actor/<type>/<id>" or "group/<id>".
func ParseObject(s string) (Object, error) {
	parts := strings.Split(s, "/")
	var o Object
	switch {
	case len(parts) == 3 && parts[0] == KindActor:
		o = Object{Kind: KindActor, Type: parts[1], ID: parts[2]}
	case len(parts) == 2 && parts[0] == KindGroup:
		o = Object{Kind: KindGroup, ID: parts[1]}
	default:
		return Object{}, fmt.Errorf("%w: %q (want actor/<type>/<id> or group/<id>)", ErrInvalidName, s)
	}
	if err := o.Validate(); err != nil {
		return Object{}, err
	}
	return o, nil
}

// Actor is a convenience constructor.
func Actor(typ, id string) Object { return Object{Kind: KindActor, Type: typ, ID: id} }

// Group is a convenience constructor.
func Group(id string) Object { return Object{Kind: KindGroup, ID: id} }

// Keys builds keys under one prefix and cluster.
type Keys struct {
	base string // "/meshloc/default/"
}

// DefaultPrefix and DefaultCluster are the flag defaults of docs/design.md §10.
const (
	DefaultPrefix  = "/meshloc"
	DefaultCluster = "default"
)

// New returns the key codec for prefix (e.g. "/meshloc") and cluster.
func New(prefix, cluster string) (Keys, error) {
	if !strings.HasPrefix(prefix, "/") || strings.HasSuffix(prefix, "/") && prefix != "/" {
		return Keys{}, fmt.Errorf("%w: prefix %q must start with / and not end with /", ErrInvalidName, prefix)
	}
	if err := validSegment("cluster", cluster); err != nil {
		return Keys{}, err
	}
	p := strings.TrimSuffix(prefix, "/")
	return Keys{base: p + "/" + cluster + "/"}, nil
}

// MustNew is New for constants known to be valid.
func MustNew(prefix, cluster string) Keys {
	k, err := New(prefix, cluster)
	if err != nil {
		panic(err)
	}
	return k
}

// Default is the codec for the default prefix and cluster.
func Default() Keys { return MustNew(DefaultPrefix, DefaultCluster) }

// Base is "/<prefix>/<cluster>/".
func (k Keys) Base() string { return k.base }

// Owner is the key of an owner's descriptor.
func (k Keys) Owner(ownerID string) string { return k.base + "owners/" + ownerID }

// OwnersPrefix is the prefix of every owner key.
func (k Keys) OwnersPrefix() string { return k.base + "owners/" }

// Authority is the key of an object's authority record.
func (k Keys) Authority(o Object) string { return k.base + "authority/" + o.String() }

// AuthorityPrefix is the prefix of every authority key.
func (k Keys) AuthorityPrefix() string { return k.base + "authority/" }

// Catalog is the key of an object's last object generation.
func (k Keys) Catalog(o Object) string { return k.base + "catalog/" + o.String() }

// State is the key of a durable object's state.
func (k Keys) State(o Object) string { return k.base + "state/" + o.String() }

// Security is the key of the cluster's security policy (internal/secpolicy).
func (k Keys) Security() string { return k.base + "security" }

// CatalogPrefix is the prefix of every catalog key.
func (k Keys) CatalogPrefix() string { return k.base + "catalog/" }

// StatePrefix is the prefix of every durable object's state key.
func (k Keys) StatePrefix() string { return k.base + "state/" }

// StateReplies is the prefix of a durable object's persisted replies, one
// key per operation: StateReplies(o) + the operation id in 32 lowercase hex
// digits. A UUIDv7's hex sorts by its time, so the oldest come first.
func (k Keys) StateReplies(o Object) string { return k.State(o) + "/replies/" }

// Relocation is the key of a relocation intent.
func (k Keys) Relocation(id string) string { return k.base + "relocations/" + id }

// BulkFence is the small key written and deleted with a bulk intent
// (Relocation(id)): each commit of the bulk compares its ModRevision, the
// intent's, without etcd reading the intent's bytes for every object.
func (k Keys) BulkFence(id string) string { return k.Relocation(id) + "/fence" }

// Controller is the election prefix of a controller that must run once per
// cluster (locationd's recovery controller: Controller("recovery")); the
// candidates' keys live under it.
func (k Keys) Controller(name string) string { return k.base + "controllers/" + name }

// RelocationsPrefix is the prefix of every relocation key.
func (k Keys) RelocationsPrefix() string { return k.base + "relocations/" }

// ParseAuthority recovers the object of an authority key.
func (k Keys) ParseAuthority(key string) (Object, error) {
	rest, ok := strings.CutPrefix(key, k.AuthorityPrefix())
	if !ok {
		return Object{}, fmt.Errorf("%w: %q is not an authority key", ErrInvalidName, key)
	}
	return ParseObject(rest)
}

// ParseOwner recovers the owner id of an owner key.
func (k Keys) ParseOwner(key string) (string, error) {
	rest, ok := strings.CutPrefix(key, k.OwnersPrefix())
	if !ok || ValidateOwnerID(rest) != nil {
		return "", fmt.Errorf("%w: %q is not an owner key", ErrInvalidName, key)
	}
	return rest, nil
}

// RemindersShard is the prefix of one shard of the reminder schedule
// (pkg/reminder): RemindersShard(s) + <due time, 13 decimal digits of Unix
// ms> + "/" + <reminder id>. Keys sort by due time within a shard, so what
// is due is one range read from the shard's start.
func (k Keys) RemindersShard(shard int) string {
	return fmt.Sprintf("%sreminders/%02x/", k.base, shard)
}

// Reminder is the schedule key of a reminder's due time.
func (k Keys) Reminder(shard int, dueMs int64, id string) string {
	return fmt.Sprintf("%s%013d/%s", k.RemindersShard(shard), dueMs, id)
}

// RemindersPrefix is the prefix of the whole reminder schedule.
func (k Keys) RemindersPrefix() string { return k.base + "reminders/" }
