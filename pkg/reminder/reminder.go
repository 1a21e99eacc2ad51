// Package reminder owns the rules of durable reminders
// (docs/developing/lifecycle.md): the definitions an object persists with
// its state (Def), the schedule entries in etcd that say when each comes
// due (Entry, laid out by shard and due time so that finding what is due
// reads only what is due), which nodes fire a shard (Roles), the firing
// request (Firing), and what a firing's answer means for its entry
// (Judge). It is pure: etcd is pkg/authority's, firing is the node's.
package reminder

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Shards is how many shards the schedule is split into: each is fired
// by one node (its primary) and watched by another (its backup), spread
// over the live nodes, so no single process fires every reminder.
const Shards = 32

// Method is the method name of a firing request. A client cannot send it
// when the cluster runs mutual TLS (only a node may); without TLS a forged
// firing can only be one a reminder would make, on time.
const Method = actor.ReminderMethod

// ErrInvalid: a definition, an entry or a firing's arguments break a rule.
var ErrInvalid = errors.New("reminder: invalid")

// Def is one reminder as its object persists it (authority.StateValue).
type Def struct {
	Name string `json:"name"`
	// Seq is the object's state write that set it (StateValue.Seq): a
	// reminder set again under the same name is another reminder, and a
	// schedule entry of the old one no longer fires.
	Seq        uint64 `json:"seq"`
	FirstDueMs int64  `json:"firstDueMs"`
	PeriodMs   int64  `json:"periodMs,omitempty"`
}

// OnSchedule reports whether dueMs is one of d's due times.
func (d Def) OnSchedule(dueMs int64) bool {
	if dueMs == d.FirstDueMs {
		return true
	}
	return d.PeriodMs > 0 && dueMs > d.FirstDueMs && (dueMs-d.FirstDueMs)%d.PeriodMs == 0
}

// NextDue is d's first due time at or after ms (false: a one-shot already
// past, which fires as soon as it can).
func (d Def) NextDue(ms int64) (int64, bool) {
	switch {
	case d.FirstDueMs >= ms:
		return d.FirstDueMs, true
	case d.PeriodMs == 0:
		return d.FirstDueMs, false
	}
	k := (ms - d.FirstDueMs + d.PeriodMs - 1) / d.PeriodMs
	return d.FirstDueMs + k*d.PeriodMs, true
}

// Validate checks a persisted list of definitions.
func Validate(defs []Def) error {
	if len(defs) > actor.MaxReminders {
		return fmt.Errorf("%w: %d reminders (at most %d)", ErrInvalid, len(defs), actor.MaxReminders)
	}
	seen := make(map[string]bool, len(defs))
	for _, d := range defs {
		spec := actor.ReminderSpec{Name: d.Name, Due: time.UnixMilli(d.FirstDueMs), Period: time.Duration(d.PeriodMs) * time.Millisecond}
		switch {
		case seen[d.Name]:
			return fmt.Errorf("%w: reminder %q twice", ErrInvalid, d.Name)
		case d.Seq == 0 || d.FirstDueMs <= 0 || d.PeriodMs < 0:
			return fmt.Errorf("%w: reminder %q: seq %d, first due %d, period %d", ErrInvalid, d.Name, d.Seq, d.FirstDueMs, d.PeriodMs)
		}
		if err := spec.Validate(spec.Due); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		seen[d.Name] = true
	}
	return nil
}

// Entry is the value of one schedule key, reminders/<shard>/<due>/<id>:
// JSON, readable with etcdctl.
type Entry struct {
	Object string `json:"object"`
	Name   string `json:"name"`
	Seq    uint64 `json:"seq"`
	// Generation is the object generation that set it: a firing carries it
	// as the caller's known generation, so a deleted object's entry is
	// answered CODE_DELETED and dropped.
	Generation int64 `json:"generation"`
	PeriodMs   int64 `json:"periodMs,omitempty"`
	// AtMs is the time of the firing's operation id when it is not the due
	// time: a firing late by more than half the de-duplication window is
	// re-based to when it was retried (written here first, so every
	// attempt uses the same id).
	AtMs int64 `json:"atMs,omitempty"`
}

// Encode is the canonical JSON of e.
func (e Entry) Encode() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // an Entry always marshals
	}
	return b
}

// DecodeEntry reads a schedule value; every error wraps ErrInvalid.
func DecodeEntry(b []byte) (Entry, error) {
	var e Entry
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	obj, err := keyspace.ParseObject(e.Object)
	switch {
	case err != nil || obj.Kind != keyspace.KindActor:
		return Entry{}, fmt.Errorf("%w: object %q", ErrInvalid, e.Object)
	case e.Seq == 0 || e.Generation <= 0 || e.PeriodMs < 0 || e.AtMs < 0:
		return Entry{}, fmt.Errorf("%w: seq %d, generation %d, period %d, at %d", ErrInvalid, e.Seq, e.Generation, e.PeriodMs, e.AtMs)
	}
	if err := (Def{Name: e.Name, Seq: e.Seq, FirstDueMs: 1, PeriodMs: e.PeriodMs}).check(); err != nil {
		return Entry{}, err
	}
	return e, nil
}

func (d Def) check() error {
	if err := Validate([]Def{d}); err != nil {
		return err
	}
	return nil
}

// ID is the schedule key's last segment for a reminder: a hash of its
// object, name and seq (32 lowercase hex digits).
func ID(object, name string, seq uint64) string {
	h := sha256.New()
	h.Write([]byte(object))
	h.Write([]byte{0})
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatUint(seq, 10)))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ShardOf is the shard an object's reminders are scheduled in.
func ShardOf(object string) int {
	h := fnv.New32a()
	h.Write([]byte(object))
	return int(h.Sum32() % Shards)
}

// Due is one schedule entry read from etcd.
type Due struct {
	Key   string
	Rev   int64 // its ModRevision
	Shard int
	DueMs int64
	Entry Entry
}

// AtMs is the time of the firing's operation id.
func (d Due) AtMs() int64 {
	if d.Entry.AtMs != 0 {
		return d.Entry.AtMs
	}
	return d.DueMs
}

// Query asks for a shard's entries due from FromMs (0: the shard's start)
// through ThroughMs, at most Limit; Result is its answer (Bad: entries
// that cannot be read). A range from the start walks every entry removed
// since etcd last compacted (etcd keeps their tombstones in its index), so
// a node that reads often starts where it last found the oldest.
type Query struct {
	Shard     int
	FromMs    int64
	ThroughMs int64
	Limit     int
}

// Result is a Query's answer.
type Result struct {
	Due, Bad []Due
}

// Firing is the request that fires one due time.
func (d Due) Firing() Firing {
	return Firing{Name: d.Entry.Name, Seq: d.Entry.Seq, DueMs: d.DueMs}
}

// Scheduled is a schedule entry to write: its shard, due time, id and
// value.
type Scheduled struct {
	Shard int
	DueMs int64
	ID    string
	Value []byte
}

// Schedule is the entry for def of object (of generation gen) due at dueMs.
func Schedule(object string, gen int64, def Def, dueMs int64) Scheduled {
	e := Entry{Object: object, Name: def.Name, Seq: def.Seq, Generation: gen, PeriodMs: def.PeriodMs}
	return Scheduled{Shard: ShardOf(object), DueMs: dueMs, ID: ID(object, def.Name, def.Seq), Value: e.Encode()}
}

// After is what the transaction persisting a firing of def at dueMs (of
// object, generation gen) writes to the schedule: the fired entry removed
// (its key: done's Value is nil) and, for a periodic reminder, the next
// one put (false: a one-shot, nothing follows). The next due time is
// Due.Next's: one period after the one fired.
func After(object string, gen int64, def Def, dueMs int64) (done, next Scheduled, ok bool) {
	done = Scheduled{Shard: ShardOf(object), DueMs: dueMs, ID: ID(object, def.Name, def.Seq)}
	if def.PeriodMs == 0 {
		return done, Scheduled{}, false
	}
	return done, Schedule(object, gen, def, dueMs+def.PeriodMs), true
}

// Next is the entry that follows d once its due time fired (false: a
// one-shot, nothing follows).
func (d Due) Next() (Scheduled, bool) {
	if d.Entry.PeriodMs == 0 {
		return Scheduled{}, false
	}
	e := d.Entry
	e.AtMs = 0
	return Scheduled{Shard: d.Shard, DueMs: d.DueMs + e.PeriodMs, ID: ID(e.Object, e.Name, e.Seq), Value: e.Encode()}, true
}
