package drain

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Hosted is an object the node hosts, as a drain sees it. Its identity is
// the node's: the same object hosted again later is another Hosted.
type Hosted interface {
	Name() string
	Object() keyspace.Object
	// Verdict is what the drain may do with it now.
	Verdict() Verdict
	// StateBytes is its state's size as far as the node knows it (<0:
	// unknown).
	StateBytes() int
}

// Host is the node a drain runs on: what it hosts, where objects may go,
// and the moves it carries out.
type Host interface {
	// Hosted is how many objects the node hosts now; Undone lists those
	// not in done, by name (one pass over them); Current is the object
	// hosted under name now (nil: none); IsHosted whether there is one.
	Hosted() int
	Undone(done map[Hosted]bool) []Hosted
	Current(name string) Hosted
	IsHosted(name string) bool
	// HostedChanged and DirectoryChanged are closed at the next change of
	// the hosted objects, of the owner directory.
	HostedChanged() <-chan struct{}
	DirectoryChanged() <-chan struct{}
	// Stopping is closed when the node stops.
	Stopping() <-chan struct{}
	// TargetStages counts the relocations in flight with this node as
	// their target (they bring objects the drain moves on).
	TargetStages() int
	// Targets are the owners an object of type typ may go to now; Takes
	// whether target may; Count how many objects the location cache gives
	// the owner id.
	Targets(typ string) ([]lease.Owner, error)
	Takes(target lease.Owner, typ string) bool
	Count(ownerID string) int
	// MoveOne relocates name to the owner id target, in the foreground,
	// within timeout; MoveBulk moves names to target as one bulk move and
	// answers each one's outcome, in order.
	MoveOne(ctx context.Context, name, target string, timeout time.Duration) MoveResult
	MoveBulk(ctx context.Context, names []string, target lease.Owner, timeout time.Duration) []BulkResult
	// Step is where a test build stops a drain between objects (nil: go
	// on).
	Step() error
}

// MoveResult is how a move of one object ended: its status, or the error
// that stopped it, said as the drain needs it.
type MoveResult struct {
	Status *pb.RelocationStatus
	Err    error
	// Busy: another relocation moves it now; NotHosted: it is not hosted
	// here (any more); NoTarget: the target refused to be one.
	Busy, NotHosted, NoTarget bool
}

// BulkResult is one object's outcome in a bulk move.
type BulkResult struct {
	Object string
	// ID is its relocation's (zero: refused before anything was written).
	ID           wire.RelocationID
	Outcome      string // completed, aborted, failed, shutdown; refused
	Code         pb.Code
	Message      string
	Interruption time.Duration
	// Alone: a bulk move does not take it (a group's member): it moves on
	// its own.
	Alone bool
}

// Params are one drain's settings, taken from its Options and the node.
type Params struct {
	Owner             string // the drained owner pair, "id@generation"
	Concurrency       int
	Timeout           time.Duration
	Attempts          int
	RelocationTimeout time.Duration
	Clock             clock.Clock
	Log               zerolog.Logger
	// Outcomes counts objects by outcome: moved, failed, retried.
	Outcomes *prometheus.CounterVec
}

// Execute runs one drain on host, its events to run's subscribers, until
// nothing is left to move (but what failed), it stalls past p.Timeout, ctx
// ends, or the node stops; the report says what moved and what did not.
func Execute(ctx context.Context, host Host, p Params, run *Run) *Report {
	start := p.Clock.Now()
	d := &drainer{host: host, p: p, ctx: ctx, start: start, lastMove: start, timeout: p.Timeout, conc: p.Concurrency, attempts: p.Attempts, run: run,
		assigned: map[string]int{}, noTarget: map[string]time.Time{}, tries: map[Hosted]*drainTries{}, ended: map[string]bool{}, alone: map[Hosted]bool{},
		report: &Report{Owner: p.Owner, Started: start}}
	d.loop()
	d.report.Duration = p.Clock.Now().Sub(start)
	return d.report
}

// OrDefault is v, or def when v is zero.
func OrDefault[T ~int | ~int32 | ~int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
