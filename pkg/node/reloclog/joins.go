package reloclog

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Joins holds the Actor Join profiles of a node as their source: a join
// answers its caller at READY and cleans up later, in the background, so
// its profile stays pending until that clean-up ran, is retired exactly
// once, and only then tombstoned (bounded) for inspection. Stop waits for
// the pending ones (Drain) and for every source run (Wait).
type Joins struct {
	mu      sync.Mutex
	pending map[wire.RelocationID]*Join
	recent  []JoinTombstone // retired, oldest first (bounded)
	wg      sync.WaitGroup  // one per join source run
	retired *prometheus.CounterVec
	now     func() time.Time
}

// NewJoins counts retired joins in retired (by outcome).
func NewJoins(retired *prometheus.CounterVec, now func() time.Time) *Joins {
	return &Joins{pending: map[wire.RelocationID]*Join{}, retired: retired, now: now}
}

// JoinTombstone is a retired Actor Join, kept (bounded) for inspection.
type JoinTombstone struct {
	RelocationID string
	Actor, Group string
	// Outcome of the relocation: completed, aborted, failed or shutdown.
	Outcome string
	// RetiredUnixMs: when the profile was retired (after the clean-up).
	RetiredUnixMs int64
}

// Join is the profile of one Actor Join.
type Join struct {
	ID           wire.RelocationID
	Actor, Group string

	readyOnce sync.Once
	ready     chan struct{}        // closed at READY, or when the run ended before it
	atReady   *pb.RelocationStatus // the status at READY
	failure   *pb.RelocationStatus // the run ended before READY

	retireOnce sync.Once
	done       chan struct{} // closed when retired
}

// NewJoin is the profile of the join of actor to group by relocation id.
func NewJoin(id wire.RelocationID, actor, group string) *Join {
	return &Join{ID: id, Actor: actor, Group: group, ready: make(chan struct{}), done: make(chan struct{})}
}

// ResolveReady answers the caller once: at READY (atReady), or with the
// final status of a run that ended before it (failure).
func (p *Join) ResolveReady(atReady, failure *pb.RelocationStatus) {
	p.readyOnce.Do(func() {
		p.atReady, p.failure = atReady, failure
		close(p.ready)
	})
}

// Ready is closed once ResolveReady ran.
func (p *Join) Ready() <-chan struct{} { return p.ready }

// Outcome is what ResolveReady was told: the status at READY, or the final
// status of a run that ended before it.
func (p *Join) Outcome() (atReady, failure *pb.RelocationStatus) { return p.atReady, p.failure }

// Add makes p pending, its source run counted until Ran; false (nothing
// done) when closing says the node stops.
func (j *Joins) Add(p *Join, closing func() bool) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if closing() {
		return false
	}
	j.pending[p.ID] = p
	j.wg.Add(1)
	return true
}

// Ran ends the count of one source run (Add).
func (j *Joins) Ran() { j.wg.Done() }

// Wait waits for every source run added.
func (j *Joins) Wait() { j.wg.Wait() }

// Pending is the number of joins whose clean-up has not been retired yet.
func (j *Joins) Pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.pending)
}

// Recent lists the retired joins (oldest first, at most 256).
func (j *Joins) Recent() []JoinTombstone {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.recent)
}

// Retire retires p once: its clean-up ran (the source run ended), so it
// leaves the pending set, is counted, and only then gets its tombstone.
func (j *Joins) Retire(p *Join, final *pb.RelocationStatus) {
	p.retireOnce.Do(func() {
		j.retired.WithLabelValues(final.GetOutcome()).Inc()
		j.mu.Lock()
		if j.pending[p.ID] == p {
			delete(j.pending, p.ID)
		}
		j.recent = append(j.recent, JoinTombstone{RelocationID: p.ID.String(), Actor: p.Actor, Group: p.Group,
			Outcome: final.GetOutcome(), RetiredUnixMs: j.now().UnixMilli()})
		if len(j.recent) > 256 {
			j.recent = j.recent[len(j.recent)-256:]
		}
		j.mu.Unlock()
		close(p.done)
	})
}

// Drain waits, bounded by ctx, until every pending join's clean-up is
// retired; it reports how many were pending when ctx ended first (0: none).
func (j *Joins) Drain(ctx context.Context) int {
	j.mu.Lock()
	ps := make([]*Join, 0, len(j.pending))
	for _, p := range j.pending {
		ps = append(ps, p)
	}
	j.mu.Unlock()
	for _, p := range ps {
		select {
		case <-p.done:
		case <-ctx.Done():
			return len(ps)
		}
	}
	return 0
}
