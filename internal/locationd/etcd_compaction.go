package locationd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Does an external etcd compact? etcd keeps every revision until something
// compacts it (its --auto-compaction-retention, or a client), and nothing
// it answers says whether anything will. What it does say is the revision
// it last compacted at: a read at revision 1 fails once anything was
// compacted, and a watch from revision 1 is then cancelled naming the
// compacted revision. etcd's own automatic compaction moves it at least
// hourly (periodic mode compacts every hour for retentions of an hour or
// more, every retention below; revision mode every 5 minutes), so a
// compacted revision that stayed put for 75 minutes while the revision grew
// by 10,000 or more means nothing compacts this etcd: locationd warns, and
// sets meshloc_etcd_auto_compaction_off.

// Auto-compaction states (api.EtcdCompaction.Auto).
const (
	autoOn      = "on"
	autoOff     = "off"
	autoUnknown = "unknown"
)

// compactionCheck is how the compacted revision is watched.
type compactionCheck struct {
	// every: how often it is read.
	every time.Duration
	// window: how long it may stay while the revision grows before "off"
	// (etcd's hourly compaction, and a margin).
	window time.Duration
	// minGrowth: a cluster that wrote less in the window has nothing
	// worth compacting, and gets no warning.
	minGrowth int64
}

// defaultCompactionCheck is locationd's (tests shorten it).
var defaultCompactionCheck = compactionCheck{every: 30 * time.Second, window: 75 * time.Minute, minGrowth: 10_000}

// compactionWatch judges, from the compacted revision observed over time,
// whether an external etcd compacts (pure: times and revisions in).
type compactionWatch struct {
	compactionCheck
	started bool
	// compacted: the last compacted revision seen; since and revSince:
	// when it last moved (or the first observation), and the revision
	// then.
	compacted int64
	since     time.Time
	revSince  int64
	state     string
}

func newCompactionWatch(c compactionCheck) *compactionWatch {
	return &compactionWatch{compactionCheck: c, state: autoUnknown}
}

// observe records that at now etcd's revision was rev and its compacted
// revision compacted; it returns the state and whether it changed.
func (w *compactionWatch) observe(now time.Time, rev, compacted int64) (string, bool) {
	prev := w.state
	switch {
	case !w.started:
		w.started, w.compacted, w.since, w.revSince = true, compacted, now, rev
	case compacted > w.compacted:
		w.compacted, w.since, w.revSince = compacted, now, rev
		w.state = autoOn
	case now.Sub(w.since) >= w.window && rev-w.revSince >= w.minGrowth:
		w.state = autoOff
	}
	return w.state, w.state != prev
}

// compactedRevision reads the revision etcd last compacted at (0: never),
// with key (one this process may read: etcd checks the watch's key).
func compactedRevision(ctx context.Context, cli *clientv3.Client, key string) (int64, error) {
	_, err := cli.Get(ctx, key, clientv3.WithRev(1), clientv3.WithCountOnly())
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, rpctypes.ErrCompacted) {
		return 0, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range cli.Watch(wctx, key, clientv3.WithRev(1)) {
		if resp.CompactRevision > 0 {
			return resp.CompactRevision, nil
		}
		if err := resp.Err(); err != nil {
			return 0, err
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("locationd: the watch from revision 1 of %s ended without a compacted revision", key)
}
