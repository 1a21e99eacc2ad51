// Package drain owns a node's drain: the loop that hands every hosted
// object to other nodes — most in bulk moves of up to 128 to one target,
// a group or a large state on its own — spreads them over the targets,
// retries an attempt that did not move an object (another target first),
// and ends when nothing is left, when it stalls past its timeout, or when
// the node stops; and the report, events and options of a drain. The node
// (pkg/node) carries out its moves and says what it hosts (Host); the
// drain decides what moves where and when.
package drain

import (
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/node/config"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ErrInvalid: an Options field is out of range; nothing was changed.
var ErrInvalid = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "node: invalid drain options")

// FailuresSent: the objects not moved a drain's stream names one by one
// (events, and in the report's Proto); Pages lists them all.
const FailuresSent = 100

// Bounds of a drain's options.
const (
	// MaxConcurrency bounds Options.Concurrency and --drain-concurrency.
	MaxConcurrency = config.MaxDrainConcurrency
	// MaxTimeout bounds Options.Timeout, and a whole drain: one
	// that keeps moving objects ends at most this long after it began.
	MaxTimeout = time.Hour
	// DefaultAttempts is how often a drain tries to move one object.
	DefaultAttempts = 3
	// minAttempt: no relocation is started with less time than this
	// left before the drain's deadline.
	minAttempt = 200 * time.Millisecond
	// noTargetWait: how long a drain waits for a node that can take a type
	// when none can (a peer restarting) before it gives up on its objects.
	noTargetWait = 2 * time.Second
)

// Options of one drain. Zero fields take the node's configuration.
type Options struct {
	// Concurrency: objects in flight at a time, in bulk moves of up to
	// 128 to one target each (0: Config.DrainConcurrency).
	Concurrency int
	// Timeout: how long the drain may go without moving an object (0:
	// Config.DrainTimeout). A drain that keeps moving objects goes on, at
	// most MaxTimeout from its start.
	Timeout time.Duration
	// Attempts per object (0: DefaultAttempts).
	Attempts int
	// Progress, if set, gets every event, one at a time, on the drain's
	// goroutines: it must not block for long.
	Progress func(Event)
}

// Validate checks the options' ranges.
func (o Options) Validate() error {
	switch {
	case o.Concurrency < 0 || o.Concurrency > MaxConcurrency:
		return fmt.Errorf("%w: concurrency %d is outside [0, %d] (0: the node's --drain-concurrency)", ErrInvalid, o.Concurrency, MaxConcurrency)
	case o.Timeout < 0 || o.Timeout > MaxTimeout:
		return fmt.Errorf("%w: timeout %s is outside [0, %s] (0: the node's --drain-timeout)", ErrInvalid, o.Timeout, MaxTimeout)
	case o.Attempts < 0 || o.Attempts > 100:
		return fmt.Errorf("%w: attempts %d is outside [0, 100]", ErrInvalid, o.Attempts)
	}
	return nil
}

// EventKind says what an Event reports.
type EventKind string

// The kinds of drain events.
const (
	Started  EventKind = "started"  // Remaining: objects hosted at the start
	Moved    EventKind = "moved"    // Object moved to Target
	Retry    EventKind = "retry"    // an attempt did not move Object (Code, Message); another follows
	Failed   EventKind = "failed"   // Object will not be moved (Code, Message)
	Progress EventKind = "progress" // the running totals (AdminService.Drain's stream only)
)

// Event is one step of a drain.
type Event struct {
	Kind   EventKind
	Object string
	// Target is the owner pair "id@generation" of the attempt.
	Target string
	// Attempt is the object's relocation attempt, from 1.
	Attempt      int
	Code         pb.Code
	Message      string
	RelocationID []byte
	Interruption time.Duration
	// Running totals, and the objects still hosted here.
	Moved, Failed, Remaining int
}

// MovedObject is an object the drain moved away.
type MovedObject struct {
	Object       string
	Target       string // owner pair "id@generation"
	RelocationID []byte
	Attempts     int
	Interruption time.Duration
}

// Failure is an object the drain could not move, and why.
type Failure struct {
	Object   string
	Code     pb.Code
	Reason   string
	Attempts int
}

// Report is the result of a drain.
type Report struct {
	Owner    string // the drained owner pair, "id@generation"
	Moved    []MovedObject
	Failed   []Failure
	Started  time.Time
	Duration time.Duration
	// Relocations started, retries included.
	Relocations int
	// Bulks: the bulk moves among them (many objects to one target each).
	Bulks int
	// EndedEarly says why the drain stopped before every object was handled
	// (its deadline, its ctx, Stop); "" when it finished.
	EndedEarly string
}

// Proto is the report as AdminService.Drain sends it: counts, and the first
// objects not moved (at most 100; Pages lists them all).
func (r *Report) Proto(stopping bool) *pb.DrainReport {
	out := &pb.DrainReport{Owner: r.Owner, StartedUnixMs: r.Started.UnixMilli(), DurationUs: r.Duration.Microseconds(),
		Relocations: uint32(r.Relocations), Stopping: stopping, EndedEarly: r.EndedEarly,
		MovedCount: uint32(len(r.Moved)), FailedCount: uint32(len(r.Failed)), Bulks: uint32(r.Bulks)}
	for _, f := range r.Failed[:min(len(r.Failed), FailuresSent)] {
		out.Failed = append(out.Failed, f.proto())
	}
	return out
}

// Pages lists every object moved, then every one not moved, per pages of at
// most size objects; the last page says so (one empty page when the drain
// handled nothing).
func (r *Report) Pages(size int) []*pb.DrainPage {
	var pages []*pb.DrainPage
	p := &pb.DrainPage{}
	room := func() {
		if len(p.Moved)+len(p.Failed) >= size {
			pages = append(pages, p)
			p = &pb.DrainPage{}
		}
	}
	for _, m := range r.Moved {
		room()
		p.Moved = append(p.Moved, m.proto())
	}
	for _, f := range r.Failed {
		room()
		p.Failed = append(p.Failed, f.proto())
	}
	p.Last = true
	return append(pages, p)
}

func (m MovedObject) proto() *pb.DrainedObject {
	return &pb.DrainedObject{Object: m.Object, Target: m.Target, RelocationId: m.RelocationID,
		Attempts: uint32(m.Attempts), InterruptionUs: m.Interruption.Microseconds()}
}

func (f Failure) proto() *pb.DrainFailure {
	return &pb.DrainFailure{Object: f.Object, Code: f.Code, Reason: f.Reason, Attempts: uint32(f.Attempts)}
}

// Proto is the event as AdminService.Drain sends it.
func (e Event) Proto() *pb.DrainProgress {
	return &pb.DrainProgress{Kind: string(e.Kind), Object: e.Object, Target: e.Target, Attempt: uint32(e.Attempt), Code: e.Code,
		Message: e.Message, RelocationId: e.RelocationID, InterruptionUs: e.Interruption.Microseconds(),
		Moved: uint32(e.Moved), Failed: uint32(e.Failed), Remaining: uint32(e.Remaining)}
}
