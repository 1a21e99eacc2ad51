// Package reminders owns a node's part in firing durable reminders
// (docs/developing/lifecycle.md): for each schedule shard this node is the
// primary or the backup of (reminder.Roles over the live nodes), it reads
// the entries that are due, sends each as a firing request to its object
// (which wakes it if it sleeps). The object's persist of the firing
// advances the entry; otherwise this node advances, removes or re-bases it
// by what the answer means (reminder.Judge). Every send of one due time carries the same
// operation id, so the object's de-duplication table absorbs a retry, a
// stale read and a backup that fired alongside its primary.
package reminders

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/reminder"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Store is the schedule in etcd (pkg/authority).
type Store interface {
	DueReminders(ctx context.Context, qs []reminder.Query) ([]reminder.Result, error)
	AdvanceReminder(ctx context.Context, d reminder.Due, next *reminder.Scheduled) (bool, error)
	RebaseReminder(ctx context.Context, d reminder.Due, atMs int64) (reminder.Due, bool, error)
}

// Config bounds the scanner.
type Config struct {
	// Tick is how often the due entries are read (a reminder fires at
	// most about Tick late on a healthy primary).
	Tick time.Duration
	// Grace is how late an entry must be before a shard's backup fires it.
	Grace time.Duration
	// InFlight bounds the firings sent at once; Batch the entries read per
	// shard per tick.
	InFlight, Batch int
	// MaxBackoff bounds the wait before an undecided firing is sent again.
	MaxBackoff time.Duration
	// FireTimeout bounds one send: a firing whose owner cannot answer (a
	// node that died, until its lease ends) gives its slot back and is
	// sent again later, instead of holding up the firings behind it.
	FireTimeout time.Duration
}

// DefaultConfig is the node's.
func DefaultConfig() Config {
	return Config{Tick: 50 * time.Millisecond, Grace: 250 * time.Millisecond, InFlight: 1024, Batch: 1024, MaxBackoff: 30 * time.Second, FireTimeout: 2 * time.Second}
}

// Deps are the scanner's seams.
type Deps struct {
	Clock clock.Clock
	Store Store
	Self  string
	// Nodes are the ids of the live serving nodes.
	Nodes func() []string
	// Fire sends a firing and returns its answer.
	Fire func(ctx context.Context, d reminder.Due, attempt int) *pb.CallReply
	// Sends counts the firings sent, by result (fired, replayed, gone,
	// expired, retry).
	Sends *prometheus.CounterVec
	Log   zerolog.Logger
}

// Scanner fires the due entries of this node's shards.
type Scanner struct {
	cfg Config
	d   Deps
	sem chan struct{}
	wg  sync.WaitGroup

	mu sync.Mutex
	// busy are the entries being fired or waiting to be sent again: key →
	// not before, and how many sends so far; shardBusy counts them by shard.
	busy      map[string]*pending
	shardBusy map[int]int
	// watch is the backup's view of its shards (scan's goroutine only).
	watch map[int]watched
	// kick: a firing ended while backlog says a scan left due entries
	// unread or unstarted: scan again without waiting for the tick.
	kick    chan struct{}
	backlog bool // scan's goroutine only
	// low is, per shard, where the next read starts (scan's goroutine
	// only): the oldest due time the last read found, or lag before it
	// ran; fullAt is when the next read starts every shard at its start
	// (an entry put behind low: a reminder set due in the past); last is
	// when the last scan ran (kicks wait gap after it).
	low          map[int]int64
	fullAt, last time.Time
	// live are the nodes live at the last scan (scan's goroutine only).
	live map[string]struct{}
}

// The reads' pacing, in Ticks: a read starts lag before it runs (an entry
// due that recently is always seen, put late or by a node whose clock is
// behind), every shard is read from its start every full, a scan kicked
// by a firing's end waits gap after the last one (a backlog's firings end
// hundreds of times a second; each read walks the tombstones of the
// entries fired since etcd compacted, from where it starts), and an
// undecided firing's first wait is backoff. The tick itself is short
// because a healthy primary's firings are late by half of it on average;
// the rest keep their lengths in time (2 s, 5 s, 50 ms, 200 ms by default).
const (
	lagTicks     = 40
	fullTicks    = 100
	gapDiv       = 1
	backoffShift = 2
	// minShare is the fewest entries a fired shard reads per scan.
	minShare = 8
)

type pending struct {
	shard     int
	notBefore time.Time
	attempts  int
	running   bool
}

// New is a scanner; Run runs it.
func New(cfg Config, d Deps) *Scanner {
	return &Scanner{cfg: cfg, d: d, sem: make(chan struct{}, cfg.InFlight), busy: map[string]*pending{}, shardBusy: map[int]int{}, watch: map[int]watched{}, kick: make(chan struct{}, 1), low: map[int]int64{}}
}

// Run reads and fires until ctx ends, then waits for the firings it sent.
func (s *Scanner) Run(ctx context.Context) {
	t := s.d.Clock.NewTicker(s.cfg.Tick)
	defer s.wg.Wait()
	defer t.Stop()
	var soon clock.Timer // a kick's scan, gap after the last
	var soonC <-chan time.Time
	defer func() {
		if soon != nil {
			soon.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			s.scan(ctx)
		case <-s.kick:
			if !s.backlog || soonC != nil {
				continue
			}
			if wait := s.last.Add(s.cfg.Tick / gapDiv).Sub(s.d.Clock.Now()); wait > 0 {
				soon = s.d.Clock.NewTimer(wait)
				soonC = soon.C()
				continue
			}
			s.scan(ctx)
		case <-soonC:
			soonC = nil
			s.scan(ctx)
		}
	}
}

// scan reads each shard this node fires and starts what is due. A shard's
// backup watches its oldest entry that is Grace late: left unchanged for
// Grace more, its primary is not making progress (dead, paused, cut off
// from etcd) and the backup fires the shard as a primary for takeFor. A
// primary that keeps up, even with a backlog, moves its oldest entry on,
// and its backup sends nothing.
func (s *Scanner) scan(ctx context.Context) {
	now := s.d.Clock.Now()
	nodes := s.d.Nodes()
	s.backlog, s.last = false, now
	full := !now.Before(s.fullAt)
	if full {
		s.fullAt = now.Add(fullTicks * s.cfg.Tick)
	}
	from := func(shard int, through int64) int64 {
		if full {
			return 0
		}
		return min(s.low[shard], through)
	}
	var qs []reminder.Query
	var watching []bool
	left := s.left(nodes)
	s.mu.Lock()
	if left {
		s.sendAgainLocked(now)
	}
	fires := func(shard int) (bool, bool) {
		primary, backup := reminder.Roles(shard, nodes)
		return s.d.Self == primary || s.d.Self == backup && now.Before(s.watch[shard].takeUntil), s.d.Self == backup
	}
	// Each shard fired reads its entries being fired (skipped) and its
	// share of the free slots, twice over: what a shard leaves, a later
	// scan reads (backlog), and a read costs etcd what it returns.
	firing, share := 0, 0
	for shard := range reminder.Shards {
		if f, _ := fires(shard); f {
			firing++
		}
	}
	if free := s.cfg.InFlight - len(s.sem); free > 0 {
		share = min(free, max(minShare, 2*free/max(firing, 1)))
	}
	for shard := range reminder.Shards {
		switch f, backup := fires(shard); {
		case f:
			if share > 0 {
				limit := min(s.cfg.Batch, share+s.shardBusy[shard])
				qs, watching = append(qs, reminder.Query{Shard: shard, FromMs: from(shard, now.UnixMilli()), ThroughMs: now.UnixMilli(), Limit: limit}), append(watching, false)
			} else {
				s.backlog = true // InFlight firings run: nothing could start
			}
		case backup:
			through := now.Add(-s.cfg.Grace).UnixMilli()
			qs, watching = append(qs, reminder.Query{Shard: shard, FromMs: from(shard, through), ThroughMs: through, Limit: watchN}), append(watching, true)
		default:
			delete(s.watch, shard)
			delete(s.low, shard)
		}
	}
	s.mu.Unlock()
	rs, err := s.d.Store.DueReminders(ctx, qs)
	if err != nil {
		if ctx.Err() == nil {
			s.d.Log.Debug().Err(err).Msg("reading due reminders")
		}
		return
	}
	for i, r := range rs {
		s.low[qs[i].Shard] = lowAfter(r, now.Add(-lagTicks*s.cfg.Tick).UnixMilli())
		if watching[i] {
			s.watchOldest(qs[i].Shard, r.Due, now)
			continue
		}
		for _, d := range r.Bad {
			s.d.Log.Warn().Str("key", d.Key).Msg("a reminder schedule entry cannot be read: removed")
			s.start(ctx, d, now, s.drop)
		}
		s.backlog = s.backlog || len(r.Due) == qs[i].Limit
		for _, d := range r.Due {
			if !s.start(ctx, d, now, s.fire) {
				s.backlog = true // InFlight firings run: the rest wait for a slot
				break
			}
		}
	}
	s.forget(now)
}

// left reports whether a node live at the last scan is not live now, and
// remembers nodes for the next scan.
func (s *Scanner) left(nodes []string) bool {
	live := make(map[string]struct{}, len(nodes))
	for _, id := range nodes {
		live[id] = struct{}{}
	}
	gone := false
	for id := range s.live {
		if _, ok := live[id]; !ok {
			gone = true
			break
		}
	}
	s.live = live
	return gone
}

// sendAgainLocked makes every firing that waits to be sent again due now
// (s.mu held). A node left: the firings it was serving, or whose objects
// it owned, waited on its lease, which has ended, and another node may
// now recover their objects. Sent at once, they are late by about a
// lease, not by a backoff grown while the lease ran.
func (s *Scanner) sendAgainLocked(now time.Time) {
	for _, p := range s.busy {
		if !p.running && p.notBefore.After(now) {
			p.notBefore = now
		}
	}
}

// lowAfter is where a shard's next read starts after r: the oldest due
// time r found (nothing is due before it, but what is put there later),
// at most lagged.
func lowAfter(r reminder.Result, lagged int64) int64 {
	if len(r.Due) > 0 {
		return max(1, min(r.Due[0].DueMs, lagged))
	}
	return max(1, lagged)
}

// takeFor is how long a backup fires a shard whose primary stalled before
// it watches again (about a lease: the directory drops a dead primary).
const takeFor = 5 * time.Second

// watchN is how many of a shard's oldest late entries its backup watches:
// a loaded primary's oldest firing may take longer than Grace, but it
// finishes one of them.
const watchN = 16

// watched is a backup's view of one shard.
type watched struct {
	seen      map[string]int64 // its oldest entries Grace late: key → revision
	since     time.Time        // when the last of them was decided
	takeUntil time.Time        // firing it as a primary until then
}

// watchOldest takes a backup's read of shard's oldest entries Grace late
// (none: nothing late). When none of those it saw before was decided
// (removed, advanced, re-based) for Grace, the primary makes no progress:
// the backup fires the shard as its primary for takeFor, from the next
// scan.
func (s *Scanner) watchOldest(shard int, due []reminder.Due, now time.Time) {
	if len(due) == 0 {
		delete(s.watch, shard)
		return
	}
	cur := make(map[string]int64, len(due))
	for _, d := range due {
		cur[d.Key] = d.Rev
	}
	w, ok := s.watch[shard]
	progress := !ok || w.seen == nil
	for k, rev := range w.seen {
		if r, still := cur[k]; !still || r != rev {
			progress = true
			break
		}
	}
	switch {
	case progress:
		s.watch[shard] = watched{seen: cur, since: now}
	case now.Sub(w.since) >= s.cfg.Grace:
		s.d.Log.Info().Int("shard", shard).Str("oldest", due[0].Key).Msg("a reminder shard's primary makes no progress: its backup fires it")
		s.watch[shard] = watched{takeUntil: now.Add(takeFor)}
		s.backlog = true // scan again at once
	default:
		w.seen = cur // entries late since are watched too
		s.watch[shard] = w
	}
}

// forget drops the waiting entries nobody read again for long: another
// node decided them (the busy map stays bounded by what is due).
func (s *Scanner) forget(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, p := range s.busy {
		if !p.running && now.Sub(p.notBefore) > 2*s.cfg.MaxBackoff {
			s.unbusyLocked(k, p)
		}
	}
}

func (s *Scanner) unbusyLocked(key string, p *pending) {
	delete(s.busy, key)
	if s.shardBusy[p.shard]--; s.shardBusy[p.shard] <= 0 {
		delete(s.shardBusy, p.shard)
	}
}

// start runs f on d unless d is being fired or waits to be sent again;
// false when InFlight firings are running.
func (s *Scanner) start(ctx context.Context, d reminder.Due, now time.Time, f func(context.Context, reminder.Due, int) bool) bool {
	s.mu.Lock()
	p := s.busy[d.Key]
	if p != nil && (p.running || now.Before(p.notBefore)) {
		s.mu.Unlock()
		return true
	}
	select {
	case s.sem <- struct{}{}:
	default:
		s.mu.Unlock()
		return false
	}
	if p == nil {
		p = &pending{shard: d.Shard}
		s.busy[d.Key] = p
		s.shardBusy[d.Shard]++
	}
	p.running = true
	attempt := p.attempts
	p.attempts++
	s.mu.Unlock()
	s.wg.Go(func() {
		defer func() {
			<-s.sem
			select {
			case s.kick <- struct{}{}: // a slot is free: scan again if there is a backlog
			default:
			}
		}()
		done := f(ctx, d, attempt)
		s.mu.Lock()
		defer s.mu.Unlock()
		if done {
			s.unbusyLocked(d.Key, p)
			return
		}
		p.running = false
		p.notBefore = s.d.Clock.Now().Add(min(s.cfg.Tick<<min(attempt+backoffShift, 10), s.cfg.MaxBackoff))
	})
	return true
}

// fire sends d and advances its entry by the answer; true when the entry
// is decided (advanced, removed, or changed by someone else).
func (s *Scanner) fire(ctx context.Context, d reminder.Due, attempt int) bool {
	// A late firing keeps its operation id until its owner answers that
	// the id left the de-duplication window (Expired), never before: an
	// attempt under it may still be running (a send given up on after
	// FireTimeout), and a firing re-based meanwhile would run again under
	// a new id. An owner checks the id's age when the firing's turn
	// comes, so once one attempt found it expired, none runs any more.
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FireTimeout)
	rep := s.d.Fire(fctx, d, attempt)
	cancel()
	code := rep.GetCode()
	switch reminder.Judge(rep) {
	case reminder.Advanced: // by the firing's own persist
		s.d.Sends.WithLabelValues("fired").Inc()
		return true
	case reminder.Replayed: // by the persist of the run it replays, or left behind by it
		s.d.Sends.WithLabelValues("replayed").Inc()
		return s.advance(ctx, d, nil)
	case reminder.Fired:
		s.d.Sends.WithLabelValues("fired").Inc()
		var next *reminder.Scheduled
		if n, ok := d.Next(); ok {
			next = &n
		}
		return s.advance(ctx, d, next)
	case reminder.Gone:
		s.d.Sends.WithLabelValues("gone").Inc()
		s.d.Log.Info().Str("object", d.Entry.Object).Str("reminder", d.Entry.Name).Str("code", code.String()).Msg("a reminder's schedule entry fired nothing: removed")
		return s.advance(ctx, d, nil)
	case reminder.Expired:
		s.d.Sends.WithLabelValues("expired").Inc()
		_, _, err := s.d.Store.RebaseReminder(ctx, d, s.d.Clock.Now().UnixMilli())
		return err == nil // re-based (read again at the next tick) or changed
	}
	s.d.Sends.WithLabelValues("retry").Inc()
	return false
}

// drop removes an entry that cannot be read.
func (s *Scanner) drop(ctx context.Context, d reminder.Due, _ int) bool {
	return s.advance(ctx, d, nil)
}

// advance replaces d by next (nil: removes it); true unless etcd left it
// unknown (then it is read and sent again: the same operation id).
func (s *Scanner) advance(ctx context.Context, d reminder.Due, next *reminder.Scheduled) bool {
	if _, err := s.d.Store.AdvanceReminder(ctx, d, next); err != nil {
		s.d.Log.Debug().Err(err).Str("key", d.Key).Msg("advancing a reminder's schedule entry")
		return false
	}
	return true
}
