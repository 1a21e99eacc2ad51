package commitmodel

import "fmt"

const (
	// Objects is how many objects the model moves: two are enough for one
	// object's outcome in a bulk to differ from the other's.
	Objects = 2
	// Moves is how many moves the source may start, one after another:
	// two, so that a stale frame of a move given up can meet the next
	// move of the same object, at the same store version when giving up
	// wrote nothing.
	Moves = 2
)

// Rule is how the source proves its decision to move and how the target's
// commit is guarded.
type Rule uint8

const (
	// Intent is design.md §3 today: the source rewrites each record with
	// the intent (compare: the store version it read, its owner key); the
	// target checks the intent, and its commit compares the record as the
	// intent wrote it. Two record writes an object.
	Intent Rule = iota
	// BulkKey writes the intent once for the bulk: relocations/<bulk>,
	// not bound to a lease, naming each object with the store version the
	// source sealed it at, written only if every one of them is still at
	// that version and the source is alive. The target reads the key once;
	// each commit compares its record's store version with the one the key
	// names, the key's own store version and the target's owner key. One
	// record write an object.
	BulkKey
	// NoKey writes nothing before the commit: the target checks that the
	// record is the source's at the version the PREPARE names, and commits
	// on that version alone. One record write an object.
	NoKey
)

func (r Rule) String() string { return [...]string{"intent", "bulk-key", "no-key"}[r] }

// Faults are rule breaks the checker must find (a model's planted bugs).
type Faults struct {
	// UnsealWithoutWrite: a source that gives up after sending PREPARE
	// serves again without a preserve that won.
	UnsealWithoutWrite bool
	// CommitSkipsBulkKey: the target neither reads the bulk key nor
	// compares its store version (BulkKey).
	CommitSkipsBulkKey bool
	// RecoverIgnoresMove: the recovery controller recovers an orphan that
	// a live move still names, before the move's deadline.
	RecoverIgnoresMove bool
	// PreserveSkipsCompare: the source's preserve rewrites the record
	// without comparing its store version.
	PreserveSkipsCompare bool
	// KeyPerSource: the bulk key is named after the source rather than
	// the bulk, so every bulk of one source writes the same key, and a
	// PREPARE is checked against whichever bulk wrote it last (BulkKey).
	KeyPerSource bool
}

// Config is one model: a rule, its faults and the source's options.
type Config struct {
	Rule   Rule
	Faults Faults
	// BulkAbort lets the source abort a whole bulk by deleting its key
	// (BulkKey), then read which records are still its own.
	BulkAbort bool
	// OwnersOnly checks only that an object never has two owners and
	// never stays halted: what a rule that can lose a moving object's
	// state still keeps.
	OwnersOnly bool
}

// node names a participant. Recovery moves an orphan to N, which never
// fails in the model.
type node uint8

const (
	nobody node = iota
	nodeS
	nodeT
	nodeN
)

func (n node) String() string { return [...]string{"-", "S", "T", "N"}[n] }

// rec is an object's authority record in etcd.
type rec struct {
	owner  node
	rev    uint8 // its ModRevision
	intent bool  // Intent: the record carries a move's intent
}

type phase uint8

const (
	serving phase = iota // the source serves it (before a move, or after a preserve won)
	sealed               // halted and captured: requests queue
	handed               // the source saw the commit in etcd and dropped its copy
	gone                 // the record names another owner: the source dropped it
)

func (p phase) String() string { return [...]string{"serving", "sealed", "handed", "gone"}[p] }

// src is the source's view of one object.
type src struct {
	phase phase
	moves uint8 // moves of it started; the current one is moves-1
	seen  uint8 // the record's store version when sealed
	ver   uint8 // the version of its state: a write served between the moves makes it 1
	wrote uint8 // Intent: the store version its intent wrote (0: not written)
	sent  bool  // PREPARE sent: from here it serves again only after a preserve that wins
}

// stage is the target's view of one move of one object.
type stage struct {
	inflight bool  // its PREPARE on the wire
	staged   bool  // its state held, not committed
	expect   uint8 // the store version its commit compares (the PREPARE's)
	ver      uint8 // the version of the state it carries
}

// tgt is the target's view of one object.
type tgt struct {
	st      [Moves]stage
	serving bool // committed and serving
}

// bulkView is what the source knows of one bulk key's write.
type bulkView uint8

const (
	bulkUntried bulkView = iota
	bulkWritten
	bulkRefused   // its compares failed, or the source gave up on an unknown outcome
	bulkUncertain // no reply: it may be written, now or later
)

// State is one state of the model: etcd's keys, each node's memory, the
// frames on the wire, and what happened (for the checks). A move is a
// bulk (BulkKey) or one object's attempt (the other rules).
type State struct {
	rec    [Objects]rec
	src    [Objects]src
	tgt    [Objects]tgt
	sAlive bool
	tAlive bool
	begun  [Moves]bool // the move started: its deadline can pass
	past   [Moves]bool // its deadline, and the controller's grace, passed
	rev    uint8       // etcd's revision

	// BulkKey: each bulk key's content (every member's store version as
	// sealed; 0: not a member), its ModRevision (0: absent), what the
	// source knows of its write, a write whose reply was lost (etcd may
	// still apply it, its compares then deciding, or never), and the key's
	// version as the target read it (0: not read).
	want     [Moves][Objects]uint8
	bulk     [Moves]uint8
	sBulk    [Moves]bulkView
	inFlight [Moves]bool
	tBulk    [Moves]uint8

	committed [Objects]bool
}

// Initial is every object owned and served by S, both nodes alive.
func Initial() State {
	s := State{sAlive: true, tAlive: true}
	for o := range s.rec {
		s.rev++
		s.rec[o] = rec{owner: nodeS, rev: s.rev}
	}
	return s
}

func (s State) String() string {
	out := fmt.Sprintf("rev=%d S:%v T:%v begun=%v past=%v bulk=%v (S knows %v, in flight %v) tBulk=%v", s.rev,
		alive(s.sAlive), alive(s.tAlive), s.begun, s.past, s.bulk, s.sBulk, s.inFlight, s.tBulk)
	for o := range Objects {
		r, a, b := s.rec[o], s.src[o], s.tgt[o]
		out += fmt.Sprintf(" | o%d rec{%v@%d intent=%v} S{%v moves=%d seen=%d wrote=%d sent=%v ver=%d} T{%v serving=%v}",
			o, r.owner, r.rev, r.intent, a.phase, a.moves, a.seen, a.wrote, a.sent, a.ver, b.st, b.serving)
	}
	return out
}

func alive(b bool) string {
	if b {
		return "up"
	}
	return "down"
}

// write applies a record write: a new store version.
func (s *State) write(o int, owner node, intent bool) uint8 {
	s.rev++
	s.rec[o] = rec{owner: owner, rev: s.rev, intent: intent}
	return s.rev
}

// move is the index of o's current move at the source.
func (s *State) move(o int) int { return int(s.src[o].moves) - 1 }

// readBack is what the source does with an object after a write of its
// own failed: the record as etcd has it says who owns it.
func (s *State) readBack(o int) phase {
	switch s.rec[o].owner {
	case nodeS:
		return serving
	case nodeT:
		return handed
	}
	return gone
}
