// Package etcdalarm follows etcd's alarms for a process whose health
// depends on its store taking writes: a meshnode's /readyz and locationd's
// /readyz, metric and dashboard. etcd raises NOSPACE when a member's file
// reaches its quota (every write that puts a key is refused until an
// operator disarms it) and CORRUPT when members' data differ; neither
// shows in a read, so a process that only reads to judge its health calls
// itself fine while the cluster cannot change.
//
// A Monitor reads etcd's alarm list every interval, and at once when told
// that a write met NOSPACE (Kick). It is not a fixer: disarming is the
// operator's (docs/operating/etcd.md), and the embedded etcd's own
// compaction (internal/embedetcd) is what keeps NOSPACE away.
package etcdalarm

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Types are the alarm types, as etcd names them ("NOSPACE", "CORRUPT").
var Types = []string{pb.AlarmType_NOSPACE.String(), pb.AlarmType_CORRUPT.String()}

// Alarm is one alarm raised on one member.
type Alarm struct {
	// Member is the member's id, in hex as etcdctl prints it.
	Member string `json:"member"`
	// Type is NOSPACE or CORRUPT.
	Type string `json:"type"`
}

// readTimeout bounds one read of the alarm list.
const readTimeout = 2 * time.Second

// Monitor follows etcd's alarms; see the package doc.
type Monitor struct {
	c        *clientv3.Client
	every    time.Duration
	log      zerolog.Logger
	onChange func([]Alarm) // called after a read that changed the alarms (in Run's goroutine)
	kick     chan struct{}

	mu     sync.Mutex
	alarms []Alarm
	read   bool // at least one read succeeded
}

// New returns a Monitor of c's cluster that reads every interval once Run
// runs; onChange (optional) is called with the alarms after each read that
// changed them.
func New(c *clientv3.Client, every time.Duration, log zerolog.Logger, onChange func([]Alarm)) *Monitor {
	return &Monitor{c: c, every: every, log: log, onChange: onChange, kick: make(chan struct{}, 1)}
}

// Run reads the alarms until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		m.Read(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

// Kick asks Run to read the alarms now (a write just met NOSPACE).
func (m *Monitor) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Read reads the alarm list now and returns it (a failed read returns the
// error and keeps the last alarms known).
func (m *Monitor) Read(ctx context.Context) ([]Alarm, error) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	resp, err := m.c.AlarmList(rctx)
	cancel()
	if err != nil {
		return m.Alarms(), err
	}
	got := make([]Alarm, 0, len(resp.Alarms))
	for _, a := range resp.Alarms {
		if a.Alarm == pb.AlarmType_NONE {
			continue
		}
		got = append(got, Alarm{Member: strconv.FormatUint(a.MemberID, 16), Type: a.Alarm.String()})
	}
	m.mu.Lock()
	had := m.alarms
	changed := !slices.Equal(got, had) || !m.read
	m.alarms, m.read = got, true
	m.mu.Unlock()
	if changed {
		m.logChange(had, got)
		if m.onChange != nil {
			m.onChange(got)
		}
	}
	return got, nil
}

func (m *Monitor) logChange(had, got []Alarm) {
	if len(got) == 0 {
		if len(had) > 0 {
			m.log.Info().Msg("etcd has no alarm any more")
		}
		return
	}
	for _, a := range got {
		ev := m.log.Error().Str("member", a.Member).Str("alarm", a.Type)
		if a.Type == pb.AlarmType_NOSPACE.String() {
			ev.Msg("etcd alarm NOSPACE: etcd is out of space and refuses every write (no object can be created or moved); " + NoSpaceHint)
		} else {
			ev.Msg("etcd alarm: " + a.Type)
		}
	}
}

// NoSpaceHint says what to do about NOSPACE, in one line.
const NoSpaceHint = "free space (etcdctl compact, then etcdctl defrag), or raise the quota, then run etcdctl alarm disarm (docs/operating/etcd.md)"

// Alarms are the alarms of the last successful read.
func (m *Monitor) Alarms() []Alarm {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.alarms)
}

// NoSpace reports whether the last read found a NOSPACE alarm.
func (m *Monitor) NoSpace() bool { return Has(m.Alarms(), pb.AlarmType_NOSPACE.String()) }

// Has reports whether alarms holds one of type typ.
func Has(alarms []Alarm, typ string) bool {
	return slices.ContainsFunc(alarms, func(a Alarm) bool { return a.Type == typ })
}
