package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// touched is the set of objects the workers have used (a call succeeded, so
// the object exists): the ones the relocator moves.
type touched struct {
	mu    sync.Mutex
	names []string
	seen  map[string]bool
}

func newTouched() *touched { return &touched{seen: map[string]bool{}} }

func (t *touched) add(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.seen[name] {
		t.seen[name] = true
		t.names = append(t.names, name)
	}
}

// pick is a random used object, "" when there is none yet.
func (t *touched) pick(rng *rand.Rand) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.names) == 0 {
		return ""
	}
	return t.names[rng.IntN(len(t.names))]
}

// relocTimeout bounds one relocation of the relocator, from the read of the
// record to the outcome (the node's own deadline is 10 s, its hard stop 5 s
// later). It does not depend on the demo's ctx: a relocation is never cut off
// by the end of the demo, so every outcome is known before the final check.
const relocTimeout = 30 * time.Second

// maxSamples bounds the interruptions kept for the final percentiles (a
// uniform sample of them all beyond that).
const maxSamples = 1 << 16

// relocStats counts the relocator's outcomes.
type relocStats struct {
	mu sync.Mutex
	// this interval
	intervalDone int
	intervalIntr []time.Duration
	// since the start
	completed, aborted, failed, shutdown, other int64
	notStarted                                  int64 // Relocate refused: not hosted here (moved, not active), busy, no target
	samples                                     []time.Duration
	seenSamples                                 int64
	msgs                                        []string // the last few reasons of outcomes other than completed
	rng                                         *rand.Rand
}

// record counts one relocation: its status, or the error that kept it from
// starting.
func (s *relocStats) record(st *pb.RelocationStatus, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.notStarted++
		return
	}
	switch st.GetOutcome() {
	case "completed":
		s.completed++
		s.intervalDone++
		d := time.Duration(st.GetInterruptionUs()) * time.Microsecond
		s.intervalIntr = append(s.intervalIntr, d)
		s.sample(d)
		return
	case "aborted":
		s.aborted++
	case "failed":
		s.failed++
	case "shutdown":
		s.shutdown++
	default:
		s.other++
	}
	msg := fmt.Sprintf("%s %s: %s", st.GetObject(), st.GetOutcome(), st.GetMessage())
	if !slices.Contains(s.msgs, msg) {
		s.msgs = append(s.msgs, msg)
		if len(s.msgs) > 3 {
			s.msgs = s.msgs[1:]
		}
	}
}

// sample keeps a uniform sample of at most maxSamples interruptions
// (reservoir sampling). Called with mu held.
func (s *relocStats) sample(d time.Duration) {
	s.seenSamples++
	if len(s.samples) < maxSamples {
		s.samples = append(s.samples, d)
		return
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(1, 2))
	}
	if i := s.rng.Int64N(s.seenSamples); i < maxSamples {
		s.samples[i] = d
	}
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	if n := len(ds); n > 0 {
		p50, p99 = ds[n/2], ds[n*99/100]
	}
	return p50, p99
}

// progress is the relocation part of a progress line, for an interval of
// secs seconds; it starts the next interval.
func (s *relocStats) progress(secs float64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p50, p99 := percentiles(s.intervalIntr)
	line := fmt.Sprintf("  relocs/s %4.0f  interruption p50 %5.2f ms p99 %5.2f ms  aborted %d failed %d",
		float64(s.intervalDone)/secs, ms(p50), ms(p99), s.aborted, s.failed)
	s.intervalDone, s.intervalIntr = 0, s.intervalIntr[:0]
	return line
}

// summary is the final line of relocation totals.
func (s *relocStats) summary(el time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p50, p99 := percentiles(s.samples)
	var b strings.Builder
	fmt.Fprintf(&b, "relocations: %d completed (%.0f/s, interruption p50 %.2f ms, p99 %.2f ms), %d aborted, %d failed, %d shutdown",
		s.completed, float64(s.completed)/el.Seconds(), ms(p50), ms(p99), s.aborted, s.failed, s.shutdown)
	if s.other > 0 {
		fmt.Fprintf(&b, ", %d other", s.other)
	}
	fmt.Fprintf(&b, "; %d not started (the object was busy, moving or not active there)", s.notStarted)
	return b.String()
}

// messages are the last few reasons of relocations that did not complete.
func (s *relocStats) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// relocator keeps moving used objects: it picks one at random, finds its
// owner among the in-process nodes and has it relocate the object to a node
// placement chooses, with up to RelocationsInFlight relocations at a time.
type relocator struct {
	nodes []*node.Node
	store *authority.Store
	used  *touched
	stats *relocStats
	rng   *rand.Rand
	// foreground: the moves start at once (otherwise the nodes pace them
	// while calls wait).
	foreground bool
}

// run relocates until ctx ends, then waits for the relocations in flight.
func (r *relocator) run(ctx context.Context) {
	sem := make(chan struct{}, RelocationsInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		if ctx.Err() != nil {
			return
		}
		name := r.used.pick(r.rng)
		if name == "" {
			<-sem
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r.stats.record(r.move(name))
		})
	}
}

// move relocates one object from its current owner.
func (r *relocator) move(name string) (*pb.RelocationStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), relocTimeout)
	defer cancel()
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return nil, err
	}
	snap, err := r.store.Read(ctx, obj)
	if err != nil {
		return nil, err
	}
	for _, n := range r.nodes {
		if n.Self() == snap.Record.Owner {
			return n.Relocate(ctx, name, node.RelocateOptions{Foreground: r.foreground})
		}
	}
	return nil, fmt.Errorf("demo: owner %s of %s is not an in-process node", snap.Record.Owner, name)
}
