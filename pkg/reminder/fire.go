package reminder

import (
	"fmt"
	"hash/fnv"
	"strconv"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Firing is what a firing request carries: which reminder (name and seq)
// and which of its due times. Its arguments are decimal strings.
type Firing struct {
	Name  string
	Seq   uint64
	DueMs int64
}

// Args are the firing request's arguments.
func (f Firing) Args() [][]byte {
	return [][]byte{[]byte(f.Name), strconv.AppendUint(nil, f.Seq, 10), strconv.AppendInt(nil, f.DueMs, 10)}
}

// ParseArgs reads a firing request's arguments (bytes from the network:
// every field is checked); errors wrap ErrInvalid.
func ParseArgs(args [][]byte) (Firing, error) {
	if len(args) != 3 {
		return Firing{}, fmt.Errorf("%w: a firing has 3 arguments, not %d", ErrInvalid, len(args))
	}
	seq, err1 := strconv.ParseUint(string(args[1]), 10, 64)
	due, err2 := strconv.ParseInt(string(args[2]), 10, 64)
	f := Firing{Name: string(args[0]), Seq: seq, DueMs: due}
	switch {
	case err1 != nil || err2 != nil || seq == 0 || due <= 0:
		return Firing{}, fmt.Errorf("%w: firing seq %q, due %q", ErrInvalid, args[1], args[2])
	case string(f.Args()[1]) != string(args[1]) || string(f.Args()[2]) != string(args[2]):
		return Firing{}, fmt.Errorf("%w: firing seq %q, due %q not canonical", ErrInvalid, args[1], args[2])
	}
	if err := Validate([]Def{{Name: f.Name, Seq: seq, FirstDueMs: due}}); err != nil {
		return Firing{}, err
	}
	return f, nil
}

// Roles are the nodes that fire shard among the live nodes (rendezvous
// hashing: a node's death moves only its own shards): primary fires its
// entries when due, backup those still there grace after (a primary that
// died, paused or lost etcd). Either may be "" (no node, or one).
func Roles(shard int, nodes []string) (primary, backup string) {
	var s1, s2 uint64
	for _, n := range nodes {
		h := fnv.New64a()
		h.Write([]byte(n))
		h.Write([]byte{0, byte(shard)})
		switch s := mix(h.Sum64()); {
		case primary == "" || s > s1:
			backup, s2 = primary, s1
			primary, s1 = n, s
		case backup == "" || s > s2:
			backup, s2 = n, s
		}
	}
	return primary, backup
}

// mix is splitmix64's finalizer: FNV's last bytes barely move its high
// bits, which rendezvous scores compare first.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Outcome is what a firing's answer means for its schedule entry.
type Outcome int

const (
	// Advanced: the object ran it, and the transaction that persisted the
	// firing replaced the entry by the next due time, or removed it
	// (After): nothing is left to write.
	Advanced Outcome = iota
	// Replayed: the object had run it (the answer came from its
	// de-duplication table). That run's persist moved the entry on,
	// unless it left it behind (a state store beside etcd removes fired
	// entries after the state's write, and that removal may fail): the
	// entry is removed if it is still as read. Left there, it would be
	// sent until its id left the window, then re-based and run again.
	Replayed
	// Fired: the object ran it but could not persist it (its change is
	// too large): the entry is replaced by the next due time, or removed,
	// by the node that sent it.
	Fired
	// Gone: the reminder is no more (cancelled, set again, its object
	// deleted or its type gone): the entry is removed.
	Gone
	// Expired: the id is too old for the object to tell whether it ran:
	// the entry is re-based (Entry.AtMs) and fired again.
	Expired
	// Retry: not decided (unavailable, moving, not due yet on the owner's
	// clock): fired again later under the same id.
	Retry
)

// Judge is what a firing's answer r means.
func Judge(r *pb.CallReply) Outcome {
	switch c := r.GetCode(); c {
	case pb.Code_CODE_NOT_FOUND, pb.Code_CODE_DELETED, pb.Code_CODE_INVALID_ARGUMENT:
		return Gone // unknown_type, data_lost: retried (a type's nodes restarting, a state an operator repairs)
	case pb.Code_CODE_OPERATION_EXPIRED:
		return Expired
	case pb.Code_CODE_OK: // a firing that ran is answered OK whatever OnReminder returned, once persisted
		if r.GetReplayed() {
			return Replayed
		}
		return Advanced
	case pb.Code_CODE_STATE_TOO_LARGE: // its change can never be persisted: dropped (logged by its node)
		return Fired
	}
	return Retry
}

// Verdict is what an owner does with a firing (Admit).
type Verdict int

const (
	// Run: the firing is a due time of one of the object's reminders.
	Run Verdict = iota
	// NoSuch: no reminder of the object has that due time (cancelled, set
	// again, or a forgery): refused, not recorded (not_found).
	NoSuch
	// NotDue: not due yet by the owner's clock: refused, not recorded
	// (unavailable: sent again later).
	NotDue
)

// Admit is the owner's rule for firing f at nowMs among the object's
// reminders defs: the verdict, and the index of the reminder it fires.
// A one-shot reminder is gone once its firing runs; a periodic one stays.
func Admit(defs []Def, f Firing, nowMs int64) (int, Verdict) {
	for i, d := range defs {
		if d.Name == f.Name && d.Seq == f.Seq && d.OnSchedule(f.DueMs) {
			if f.DueMs > nowMs {
				return i, NotDue
			}
			return i, Run
		}
	}
	return -1, NoSuch
}
