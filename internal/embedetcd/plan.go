package embedetcd

import "time"

// The maintenance decisions (maintain.go carries them out): from what one
// round saw — the time, the current revision, the file's size and the part
// of it in use, the quota, leadership, the NOSPACE alarm — decide whether
// to compact, at which revision, and whether to defragment. No I/O, no
// clock: the loop passes the time in, so the rules are tested as a table.

// Fixed rules of the maintenance (documented with Maintenance).
const (
	// tick is how often the loop looks at the member: every look is a
	// few in-process reads, and the writes between two looks are what may
	// pass five eighths of the quota before the history goes.
	tick = 100 * time.Millisecond
	// minRetention is the history kept whatever the pressure: a cache's
	// list-then-watch and a watch's reconnect need a few seconds.
	minRetention = 5 * time.Second
	// maxCompactEvery bounds the normal compaction interval (Retention/10
	// up to this): each compaction walks etcd's whole key index.
	maxCompactEvery = 5 * time.Minute
	// defragEvery is the least time between two defragmentations: each
	// blocks the member while it copies the file. A file at three
	// quarters of the quota or more (NOSPACE comes at the file's size,
	// not its part in use) may be defragmented every defragNearEvery.
	defragEvery     = 5 * time.Minute
	defragNearEvery = 30 * time.Second
	// defragMinFree is the least free space worth a defragmentation
	// (or an eighth of the quota, if that is smaller).
	defragMinFree = 32 << 20
)

// sample is the revision the member was at, at a time.
type sample struct {
	at  time.Time
	rev int64
}

// round is what the loop read in one look at the member.
type round struct {
	now         time.Time
	rev         int64 // the current revision
	size, inUse int64 // the file's size, and the part of it in use
	quota       int64
	leader      bool // only the leader compacts (compaction goes through raft)
	noSpace     bool // a NOSPACE alarm is on
}

// pressure is how close the member is to its quota.
type pressure int

const (
	relaxed   pressure = iota // under half the quota in use: the retention rules
	pressed                   // half or more: the older half of the history goes, each round
	emergency                 // five eighths or more, or NOSPACE: all of it goes
)

// decision of one round: compact at compact (> 0), defragment.
type decision struct {
	compact  int64
	pressure pressure // compact is the quota's, not the retention's, when above relaxed
	defrag   bool
}

// planner keeps the samples of the last Retention and what was done.
type planner struct {
	retention time.Duration // > 0
	defrag    bool
	every     time.Duration // normal compaction interval

	samples     []sample // oldest first, one per round
	compacted   int64    // the last revision compacted at
	compactedAt time.Time
	defragAt    time.Time
}

func newPlanner(m Maintenance) *planner {
	return &planner{retention: m.Retention, defrag: m.Defrag, every: compactEvery(m.Retention)}
}

// compactEvery is the normal compaction interval for a retention:
// a tenth of it, from a second to maxCompactEvery.
func compactEvery(retention time.Duration) time.Duration {
	return min(max(retention/10, time.Second), maxCompactEvery)
}

// pressureOf r: the file's part in use against the quota. Half leaves the
// other half for live data and the writes of the rounds until a
// compaction has freed pages; at five eighths, or once the NOSPACE alarm
// is on, the history goes whole (a watcher that needed it lists again,
// which is better than every write refused), and the last three eighths
// are for the writes until that compaction's pages are free again.
func pressureOf(r round) pressure {
	switch {
	case r.noSpace || r.quota > 0 && r.inUse*8 >= r.quota*5:
		return emergency
	case r.quota > 0 && r.inUse*2 >= r.quota:
		return pressed
	}
	return relaxed
}

// step records r and decides.
func (p *planner) step(r round) decision {
	// One sample a round, or a hundredth of the retention apart if that
	// is longer: at most about a hundred are kept.
	if n := len(p.samples); n == 0 || r.now.Sub(p.samples[n-1].at) >= p.retention/100 {
		p.samples = append(p.samples, sample{at: r.now, rev: r.rev})
	}
	d := decision{pressure: pressureOf(r)}
	if r.leader {
		d.compact = p.compactAt(r, d.pressure)
	}
	d.defrag = p.defragNow(r)
	p.trim(r.now)
	return d
}

// compactAt is the revision to compact at in round r (0: none). Relaxed,
// the newest revision at least Retention old, once per interval. Pressed,
// every round the older half of the history kept goes (never the last
// minRetention), so it shrinks until the pressure ends without being cut
// deeper than it must. In an emergency, every round, all of it.
func (p *planner) compactAt(r round, level pressure) int64 {
	now := r.now
	keep := p.retention
	switch level {
	case emergency:
		if r.rev <= p.compacted {
			return 0
		}
		return r.rev
	case pressed:
		// The history kept begins at the revision last compacted at (or
		// at the oldest sample: the process's start, or Retention ago).
		start := p.samples[0].at
		for _, s := range p.samples {
			if s.rev >= p.compacted {
				start = s.at
				break
			}
		}
		keep = max(now.Sub(start)/2, min(minRetention, p.retention))
	default:
		if now.Sub(p.compactedAt) < p.every {
			return 0
		}
	}
	var rev int64
	for _, s := range p.samples {
		if now.Sub(s.at) < keep {
			break
		}
		rev = s.rev
	}
	if rev <= p.compacted {
		return 0
	}
	return rev
}

// defragNow: the file is mostly free (half or more, and at least
// defragMinFree or an eighth of the quota), and the last defragmentation
// is defragEvery old; or the file is at three quarters of the quota or
// more, a quarter of it free, and the last one is defragNearEvery old.
func (p *planner) defragNow(r round) bool {
	if !p.defrag {
		return false
	}
	since := r.now.Sub(p.defragAt)
	if p.defragAt.IsZero() {
		since = defragEvery
	}
	free := r.size - r.inUse
	if r.quota > 0 && r.size*4 >= r.quota*3 && free*4 >= r.size && since >= defragNearEvery {
		return true
	}
	least := int64(defragMinFree)
	if r.quota > 0 {
		least = min(least, r.quota/8)
	}
	return free*2 >= r.size && free >= least && since >= defragEvery
}

// trim drops the samples no decision can use: those older than the newest
// one at least Retention old.
func (p *planner) trim(now time.Time) {
	i := 0
	for i+1 < len(p.samples) && now.Sub(p.samples[i+1].at) >= p.retention {
		i++
	}
	p.samples = p.samples[i:]
}

// didCompact records a compaction at rev, done at now.
func (p *planner) didCompact(rev int64, now time.Time) {
	p.compacted, p.compactedAt = max(p.compacted, rev), now
}

// didDefrag records a defragmentation done at now.
func (p *planner) didDefrag(now time.Time) { p.defragAt = now }
