package locationd

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/etcdalarm"
	"github.com/meshloc/meshloc/pkg/api"
)

// The etcd locationd uses, watched (docs/operating/etcd.md): its
// alarms (a NOSPACE alarm fails /readyz: etcd refuses every write, while
// reads, which is all /readyz used to try, still work), each endpoint's
// size against its quota, and how short its history is kept — by the
// embedded etcd's own maintenance (internal/embedetcd), or, for an
// external etcd, by whatever compacts it (etcd_compaction.go: warned about
// when nothing does). Metrics: meshloc_etcd_*; GET /v1/etcd; the
// dashboard's etcd line.

const (
	// etcdMonitorEvery is how often the alarms and sizes are read.
	etcdMonitorEvery = 5 * time.Second
	// etcdStatusTimeout bounds one endpoint's status read.
	etcdStatusTimeout = 2 * time.Second
)

// etcdMetrics are the meshloc_etcd_* metrics of one Server.
type etcdMetrics struct {
	alarm                       *prometheus.GaugeVec // by type
	dbSize, dbInUse, quota      *prometheus.GaugeVec // by endpoint
	compacted, history, autoOff prometheus.Gauge
}

func newEtcdMetrics(reg *prometheus.Registry) *etcdMetrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	byEndpoint := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"endpoint"})
	}
	m := &etcdMetrics{
		alarm: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshloc_etcd_alarm",
			Help: "1 while etcd has an alarm of this type raised (NOSPACE: out of space, every write refused; CORRUPT), as locationd last read etcd's alarm list."},
			[]string{"type"}),
		dbSize:  byEndpoint("meshloc_etcd_db_size_bytes", "Size of the etcd member's file: etcd raises NOSPACE when it reaches meshloc_etcd_quota_bytes."),
		dbInUse: byEndpoint("meshloc_etcd_db_size_in_use_bytes", "Part of the etcd member's file in use (the rest is free pages, reused; a defragmentation gives it back)."),
		quota:   byEndpoint("meshloc_etcd_quota_bytes", "The etcd member's quota (--quota-backend-bytes; the embedded etcd's --etcd-quota-bytes)."),
		compacted: gauge("meshloc_etcd_compacted_revision",
			"The revision etcd last compacted at (0: never)."),
		history: gauge("meshloc_etcd_history_revisions",
			"Revisions etcd keeps since its last compaction: grows without bound when nothing compacts it."),
		autoOff: gauge("meshloc_etcd_auto_compaction_off",
			"1 when nothing compacts etcd: the embedded etcd's retention is 0, or an external etcd's compacted revision stayed for 75 minutes while it was written."),
	}
	for _, t := range etcdalarm.Types {
		m.alarm.WithLabelValues(t).Set(0)
	}
	reg.MustRegister(m.alarm, m.dbSize, m.dbInUse, m.quota, m.compacted, m.history, m.autoOff)
	return m
}

// etcdMonitor watches the etcd of one Run (see above).
type etcdMonitor struct {
	s        *Server
	cli      *clientv3.Client
	embedded *embedetcd.Server // nil: an external etcd
	alarms   *etcdalarm.Monitor
	m        *etcdMetrics

	mu        sync.Mutex
	watch     *compactionWatch // external etcd only
	compacted int64
	history   int64
	auto      string
	readAt    time.Time // of the compacted revision
}

// startEtcdMonitor starts watching cli's etcd (embedded, when locationd
// runs it) until stop is called; stop waits for it.
func (s *Server) startEtcdMonitor(cli *clientv3.Client, embedded *embedetcd.Server) (mon *etcdMonitor, stop func()) {
	mon = &etcdMonitor{s: s, cli: cli, embedded: embedded, m: s.etcdm, auto: autoUnknown}
	mon.alarms = etcdalarm.New(cli, etcdMonitorEvery, s.log.With().Str("component", "etcd").Logger(), func(as []etcdalarm.Alarm) {
		for _, t := range etcdalarm.Types {
			v := 0.0
			if etcdalarm.Has(as, t) {
				v = 1
			}
			mon.m.alarm.WithLabelValues(t).Set(v)
		}
	})
	if embedded != nil {
		st := embedded.Stats()
		mon.auto = autoOn
		if st.Retention <= 0 {
			mon.auto = autoOff
			mon.m.autoOff.Set(1)
			s.log.Warn().Msg("the embedded etcd does not compact (--etcd-compaction-retention 0): its history grows until the quota, then every write fails (NOSPACE)")
		}
		s.reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meshloc_etcd_compactions_total",
				Help: "Compactions by the embedded etcd member's own maintenance (of the history older than --etcd-compaction-retention, or more near the quota)."},
				func() float64 { return float64(embedded.Stats().Compactions) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meshloc_etcd_pressure_compactions_total",
				Help: "Compactions by the embedded etcd member's own maintenance made because its data was at half its quota or more (the history kept was cut short)."},
				func() float64 { return float64(embedded.Stats().PressureCompactions) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meshloc_etcd_defrags_total",
				Help: "Defragmentations of the embedded etcd member by its own maintenance."},
				func() float64 { return float64(embedded.Stats().Defrags) }),
		)
	} else {
		mon.watch = newCompactionWatch(s.compaction)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { mon.run(ctx) })
	return mon, func() { cancel(); wg.Wait() }
}

func (mon *etcdMonitor) run(ctx context.Context) {
	t := time.NewTicker(min(etcdMonitorEvery, mon.s.compaction.every))
	defer t.Stop()
	var looked time.Time
	for {
		if time.Since(looked) >= etcdMonitorEvery {
			_, _ = mon.alarms.Read(ctx)
			mon.statuses(ctx)
			looked = time.Now()
		}
		if time.Since(mon.readAt) >= mon.s.compaction.every {
			mon.readCompaction(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// statuses reads every endpoint's status, and sets the size metrics.
func (mon *etcdMonitor) statuses(ctx context.Context) []api.EtcdMember {
	eps := mon.cli.Endpoints()
	out := make([]api.EtcdMember, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, etcdStatusTimeout)
			defer cancel()
			out[i] = api.EtcdMember{Endpoint: ep}
			st, err := mon.cli.Status(sctx, ep)
			if err != nil {
				out[i].Error = err.Error()
				return
			}
			out[i].ID = strconv.FormatUint(st.Header.MemberId, 16)
			out[i].Leader = st.Leader == st.Header.MemberId
			out[i].Revision, out[i].DBSize, out[i].DBSizeInUse, out[i].QuotaBytes = st.Header.Revision, st.DbSize, st.DbSizeInUse, st.DbSizeQuota
			out[i].Errors = st.Errors
			mon.m.dbSize.WithLabelValues(ep).Set(float64(st.DbSize))
			mon.m.dbInUse.WithLabelValues(ep).Set(float64(st.DbSizeInUse))
			mon.m.quota.WithLabelValues(ep).Set(float64(st.DbSizeQuota))
		})
	}
	wg.Wait()
	return out
}

// readCompaction reads the compacted revision; for an external etcd, it
// judges whether anything compacts it, and warns when nothing does.
func (mon *etcdMonitor) readCompaction(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, etcdStatusTimeout)
	defer cancel()
	resp, err := mon.cli.Get(rctx, mon.s.keys.Base()+"\x00", clientv3.WithCountOnly())
	if err != nil {
		return
	}
	rev := resp.Header.Revision
	compacted, err := compactedRevision(rctx, mon.cli, mon.s.keys.Base()+"\x00")
	if err != nil {
		return
	}
	now := time.Now()
	mon.mu.Lock()
	mon.readAt, mon.compacted, mon.history = now, compacted, rev-compacted
	var state string
	var changed bool
	if mon.watch != nil {
		state, changed = mon.watch.observe(now, rev, compacted)
		mon.auto = state
	}
	var since time.Time
	if mon.watch != nil {
		since = mon.watch.since
	}
	mon.mu.Unlock()
	mon.m.compacted.Set(float64(compacted))
	mon.m.history.Set(float64(rev - compacted))
	if mon.watch == nil || !changed {
		return
	}
	if state == autoOff {
		mon.m.autoOff.Set(1)
		mon.s.log.Warn().Strs("etcd", mon.cli.Endpoints()).Int64("compactedRevision", compacted).Int64("revision", rev).
			Time("compactedSince", since).
			Msg("etcd does not compact: its compacted revision stayed while it grew; its history grows until the quota, then every write fails (NOSPACE). Run etcd with --auto-compaction-retention (docs/operating/etcd.md)")
	} else {
		mon.m.autoOff.Set(0)
		if state == autoOn {
			mon.s.log.Info().Int64("compactedRevision", compacted).Msg("etcd compacts")
		}
	}
}

// status is GET /v1/etcd's answer, read now.
func (mon *etcdMonitor) status(ctx context.Context) (api.EtcdStatus, error) {
	alarms, err := mon.alarms.Read(ctx)
	if err != nil {
		return api.EtcdStatus{}, fmt.Errorf("%w: etcd's alarm list: %w", errUnavailable, err)
	}
	out := api.EtcdStatus{Embedded: mon.embedded != nil, Members: mon.statuses(ctx), Alarms: []api.EtcdAlarm{}}
	for _, a := range alarms {
		out.Alarms = append(out.Alarms, api.EtcdAlarm{Member: a.Member, Type: a.Type})
	}
	if etcdalarm.Has(alarms, "NOSPACE") {
		out.Hint = "etcd is out of space and refuses every write (no object can be created or moved): " + etcdalarm.NoSpaceHint
	} else if len(alarms) > 0 {
		out.Hint = "etcd has an alarm: see etcd's log and its documentation"
	}
	mon.mu.Lock()
	out.Compaction = api.EtcdCompaction{CompactedRevision: mon.compacted, History: mon.history, Auto: mon.auto}
	mon.mu.Unlock()
	if e := mon.embedded; e != nil {
		st := e.Stats()
		c := &out.Compaction
		c.Retention, c.Defrag = st.Retention.String(), mon.s.cfg.EtcdDefrag
		c.Compactions, c.PressureCompactions, c.Defrags = st.Compactions, st.PressureCompactions, st.Defrags
	}
	return out, nil
}

// ready fails while etcd has an alarm: NOSPACE refuses every write, which a
// read does not show.
func (mon *etcdMonitor) ready(ctx context.Context) error {
	alarms, err := mon.alarms.Read(ctx)
	if err != nil {
		return fmt.Errorf("%w: etcd's alarm list: %w", errUnavailable, err)
	}
	for _, a := range alarms {
		if a.Type == "NOSPACE" {
			return fmt.Errorf("%w: etcd NOSPACE alarm on member %s: etcd is out of space and refuses every write (no object can be created or moved); %s",
				errUnavailable, a.Member, etcdalarm.NoSpaceHint)
		}
		return fmt.Errorf("%w: etcd %s alarm on member %s", errUnavailable, a.Type, a.Member)
	}
	return nil
}
