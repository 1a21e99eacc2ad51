package embedetcd

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"

	"github.com/meshloc/meshloc/pkg/clock"
)

// An etcd member keeps every revision of every key until it is compacted,
// and its file (bbolt) never shrinks until it is defragmented; at its quota
// every write fails (the NOSPACE alarm). A member started here looks after
// itself: a loop (run from Start, stopped by Close; a round every 100 ms)
// compacts the history older than
// Maintenance.Retention, compacts harder while the file's part in use is
// half the quota or more, and defragments when the file is mostly free
// space (plan.go decides; this file carries it out). Its reaction time
// bounds what it can protect: the writes of one round and one compaction
// must fit in the last three eighths of the quota (a quota of 8 MiB holds
// against about 5 MiB/s of writes; 256 MiB against much more than etcd
// takes on one machine).
//
// Why a retention of a minute is enough for meshloc (docs/design.md §2): no
// reader of meshloc needs etcd's history for its correctness. Every watcher
// — the location caches, the owner directory, the recovery controller, the
// event stream's source, the lease keeper — lists at a revision R, then
// watches from R+1, and on ErrCompacted lists again; paged reads at one
// revision (a cache's load, GET /v1/objects?revision=R) end with a typed
// "compacted" error, and a record's history (?history=N) says where it was
// compacted. The retention only has to outlast the gap between a list and
// its watch (a load of a million records takes seconds) and a watch's
// reconnect after a leader change, so that they do not list again for
// nothing. A verification audit that replays etcd's history from a revision
// needs it kept: run it with Retention 0 (no compaction).

// Defaults of the maintenance, the same for locationd, its demo, the
// bench and the tests.
const (
	// DefaultRetention of the history kept (see above).
	DefaultRetention = time.Minute
	// DefaultQuotaBytes is etcd's own default quota (2 GiB).
	DefaultQuotaBytes = 2 << 30
	// MaxQuotaBytes is the largest quota etcd recommends (8 GiB).
	MaxQuotaBytes = 8 << 30
)

// Maintenance is what a member does by itself to stay small.
type Maintenance struct {
	// Retention is how long past revisions are kept for watchers and
	// history reads: the loop compacts at the newest revision at least
	// this old, every tenth of it (1 s..5 min). While the file's part in
	// use is half the quota or more, it compacts every round, each time
	// the older half of the history kept, never the last 5 s; at five
	// eighths, or while a NOSPACE alarm is on, every round at the current
	// revision. 0: never compact (the whole history stays: an audit that
	// replays it).
	Retention time.Duration
	// Defrag: defragment the member when its file is mostly free — half
	// of it or more, and at least 32 MiB (or an eighth of the quota) —
	// at most once every 5 minutes (30 s once the file is at three
	// quarters of the quota). A defragmentation blocks the member's reads
	// and writes while it copies its data in use to a new file.
	Defrag bool
}

// DefaultMaintenance is the maintenance of every member started here unless
// told otherwise: compaction to DefaultRetention, defragmentation on.
func DefaultMaintenance() Maintenance {
	return Maintenance{Retention: DefaultRetention, Defrag: true}
}

// Stats are the maintenance's counts and the member's size, for metrics.
type Stats struct {
	Retention time.Duration
	// Revision is the current one, Compacted the last compacted at by this
	// member's loop (0: none yet).
	Revision, Compacted int64
	// Compactions by this member, and those of them made under pressure
	// (the file half the quota or more, or NOSPACE).
	Compactions, PressureCompactions int64
	Defrags                          int64
	LastDefrag                       time.Duration // how long the last one blocked the member
	// DBSize is the file's size, DBSizeInUse its part in use, Quota the
	// quota (etcd's NOSPACE comes when DBSize reaches it).
	DBSize, DBSizeInUse, Quota int64
	// NoSpace: the NOSPACE alarm is on.
	NoSpace bool
	// Rounds the loop completed (ten a second).
	Rounds int64
}

// maintainer runs the loop of one member.
type maintainer struct {
	s     *Server
	cfg   Maintenance
	log   zerolog.Logger
	clock clock.Clock
	tick  time.Duration

	mu        sync.Mutex
	plan      *planner // nil: neither compaction nor defragmentation
	stats     Stats
	pressured bool // the last round was under pressure (logged once)

	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	done   chan struct{}
}

// startMaintainer starts the loop of s; close stops it.
func startMaintainer(s *Server, cfg Maintenance, log zerolog.Logger, every time.Duration) *maintainer {
	ctx, cancel := context.WithCancel(context.Background())
	m := &maintainer{s: s, cfg: cfg, log: log, clock: clock.Real(), tick: cmp.Or(every, tick), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if cfg.Retention > 0 || cfg.Defrag {
		m.plan = newPlanner(cfg)
	}
	m.stats.Retention, m.stats.Quota = cfg.Retention, s.quota
	go m.run()
	return m
}

// close stops the loop and waits for it (a compaction in progress ends
// first).
func (m *maintainer) close() {
	m.cancel()
	<-m.done
}

// run makes a round every tick: the writes between two rounds are what
// may pass five eighths of the quota before the history goes.
func (m *maintainer) run() {
	defer close(m.done)
	t := m.clock.NewTicker(m.tick)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C():
		}
		m.once(m.ctx)
	}
}

// read is one look at the member.
func (m *maintainer) read() round {
	srv := m.s.e.Server
	be := srv.Backend()
	r := round{now: m.clock.Now(), rev: srv.KV().Rev(), size: be.Size(), inUse: be.SizeInUse(),
		quota: m.s.quota, leader: srv.Leader() == srv.MemberID()}
	for _, a := range srv.Alarms() {
		if a.GetAlarm() == pb.AlarmType_NOSPACE {
			r.noSpace = true
		}
	}
	return r
}

// once makes one round.
func (m *maintainer) once(ctx context.Context) {
	r := m.read()
	var d decision
	m.mu.Lock()
	if m.plan != nil {
		d = m.plan.step(r)
		if m.cfg.Retention <= 0 {
			d.compact = 0
		}
	}
	m.stats.Revision, m.stats.DBSize, m.stats.DBSizeInUse, m.stats.Quota, m.stats.NoSpace = r.rev, r.size, r.inUse, r.quota, r.noSpace
	pressed := d.pressure > relaxed
	started, ended := pressed && !m.pressured, !pressed && m.pressured
	m.pressured = pressed
	m.mu.Unlock()
	if started && m.cfg.Retention > 0 {
		m.log.Warn().Int64("dbSizeInUse", r.inUse).Int64("quota", r.quota).Bool("noSpace", r.noSpace).
			Msg("etcd's data is half its quota or more: compacting harder, keeping less history than the retention; raise the quota (--etcd-quota-bytes)")
	} else if ended {
		m.log.Info().Int64("dbSizeInUse", r.inUse).Int64("quota", r.quota).Msg("etcd's data is under half its quota again")
	}

	if d.compact > 0 {
		// Physical: the call returns once the revisions are deleted, so
		// the next round sees the space they held free.
		_, err := m.s.e.Server.Compact(ctx, &pb.CompactionRequest{Revision: d.compact, Physical: true})
		if err == nil || errors.Is(err, mvcc.ErrCompacted) {
			m.mu.Lock()
			m.plan.didCompact(d.compact, m.clock.Now())
			m.stats.Compacted = max(m.stats.Compacted, d.compact)
			m.stats.Compactions++
			if d.pressure > relaxed {
				m.stats.PressureCompactions++
			}
			m.mu.Unlock()
			m.log.Debug().Int64("revision", d.compact).Int64("current", r.rev).Int64("dbSizeInUse", r.inUse).Int64("quota", r.quota).
				Int("pressure", int(d.pressure)).Msg("etcd compacted")
		} else if ctx.Err() == nil {
			m.log.Warn().Err(err).Int64("revision", d.compact).Msg("etcd compaction failed; tried again next round")
		}
	}
	if d.defrag && ctx.Err() == nil {
		start := m.clock.Now()
		err := m.s.e.Server.Defragment()
		took := m.clock.Now().Sub(start)
		m.mu.Lock()
		m.plan.didDefrag(m.clock.Now())
		if err == nil {
			m.stats.Defrags++
			m.stats.LastDefrag = took
		}
		m.mu.Unlock()
		if err != nil {
			m.log.Warn().Err(err).Msg("etcd defragmentation failed")
		} else {
			be := m.s.e.Server.Backend()
			m.log.Info().Int64("dbSizeBefore", r.size).Int64("dbSize", be.Size()).Dur("took", took).Msg("etcd defragmented")
		}
	}
	m.mu.Lock()
	m.stats.Rounds++
	m.mu.Unlock()
}

// snapshot is the stats now (the sizes and revision read now).
func (m *maintainer) snapshot() Stats {
	m.mu.Lock()
	st := m.stats
	m.mu.Unlock()
	srv := m.s.e.Server
	st.Revision, st.DBSize, st.DBSizeInUse = srv.KV().Rev(), srv.Backend().Size(), srv.Backend().SizeInUse()
	return st
}
