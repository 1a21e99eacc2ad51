package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// stormObjects is how many objects the etcd part's storm moves, each by a
// worker of its own: the relocations in flight.
const stormObjects = 64

// scaleEtcd is the scale section's etcd part: does etcd stay small under a
// long relocation storm? Its own cluster: an embedded etcd under the quota
// p.StormQuota, with the maintenance every locationd's embedded etcd runs
// (embedetcd.DefaultMaintenance: compaction to a minute's history, harder
// near the quota; defragmentation), and two nodes with meshnode's
// defaults. For p.Storm, stormObjects counters are moved between the two
// nodes as foreground relocations, each again as soon as its last move
// ended. The figure is etcd's data in use at its peak over the storm's
// last minute against its peak over the first minute (≤ 1.5×: the history
// does not grow with time); beside it, the file's peak against the quota
// (< 1×: no NOSPACE), with the alarms raised in its note.
func (x *run) scaleEtcd(p ScalePlan) error {
	m, done, err := x.scaleCluster("etcd", func(c *embedetcd.Config) {
		c.QuotaBytes, c.Maintenance = p.StormQuota, nil // nil: locationd's maintenance
	})
	if err != nil {
		return err
	}
	defer done()
	ctx := x.ctx
	for _, name := range []string{"n1", "n2"} {
		if err := m.startNode(ctx, name, defaultFlags); err != nil {
			return err
		}
	}
	c, err := client.New(ctx, client.Config{Etcd: m.ec, Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	defer c.Close()
	at := make([]string, stormObjects) // the node each object is on
	for i := range at {
		r, err := c.Call(ctx, stormName(i), "add", "1")
		if err != nil {
			return fmt.Errorf("bench: create %s: %w", stormName(i), err)
		}
		at[i] = r.Node
	}

	// The window each peak is taken over: a minute, or half a shorter storm.
	w := min(time.Minute, p.Storm/2)
	x.step("scale: etcd: a foreground relocation storm of %d objects between n1 and n2 for %s, etcd quota %d MiB, retention %s",
		stormObjects, p.Storm, p.StormQuota>>20, embedetcd.DefaultRetention)
	sctx, stop := context.WithTimeout(ctx, p.Storm)
	defer stop()
	var moved, other atomic.Int64
	var wg sync.WaitGroup
	for i := range at {
		wg.Go(func() {
			for sctx.Err() == nil {
				to := map[string]string{"n1": "n2", "n2": "n1"}[at[i]]
				st, err := m.nodes[at[i]].Relocate(sctx, stormName(i), node.RelocateOptions{Target: to, Foreground: true})
				switch {
				case err == nil && st.GetOutcome() == "completed":
					at[i] = to
					moved.Add(1)
				case sctx.Err() == nil:
					other.Add(1)
				}
			}
		})
	}
	s := x.sampleEtcd(sctx, m.etcd, p.Storm, w, &moved)
	wg.Wait()
	final := m.etcd.Stats()
	alarms, err := m.ec.AlarmList(ctx)
	if err != nil {
		return err
	}

	span := "minute"
	if w != time.Minute {
		span = w.String()
	}
	first := Measure{Name: "etcd db in use, peak of the storm's first " + span, Value: mib(s.first), Unit: "MiB", N: s.firstN}
	x.base(first)
	note := fmt.Sprintf("%s storm: %d relocations (%.0f/s), %d not completed; %d revisions; %d compactions (%d near the quota), %d defragmentations; db in use %.1f MiB after it",
		p.Storm, moved.Load(), float64(moved.Load())/p.Storm.Seconds(), other.Load(), final.Revision-s.rev0,
		final.Compactions-s.stats0.Compactions, final.PressureCompactions-s.stats0.PressureCompactions, final.Defrags-s.stats0.Defrags, mib(final.DBSizeInUse))
	x.fig(Measure{Name: "etcd db in use, peak of the storm's last " + span, Value: mib(s.last), Unit: "MiB", N: s.lastN, Note: note}, first.Name, le(1.5))
	quota := Measure{Name: "etcd quota", Value: mib(p.StormQuota), Unit: "MiB", N: 1}
	x.base(quota)
	x.fig(Measure{Name: "etcd file, peak during the storm", Value: mib(s.file), Unit: "MiB", N: s.firstN + s.lastN,
		Note: fmt.Sprintf("alarms raised: %d (seen during the storm: %v)", len(alarms.Alarms), s.noSpace)}, quota.Name, le(1))
	return nil
}

func stormName(i int) string { return fmt.Sprintf("actor/counter/etcd-storm-%d", i) }

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// etcdSamples are the peaks the sampler saw.
type etcdSamples struct {
	first, last   int64 // db in use: peak of the first and last windows
	firstN, lastN int64 // samples in each
	file          int64 // the file's peak over the storm
	noSpace       bool  // a NOSPACE alarm was seen
	rev0          int64 // the revision at the start
	stats0        embedetcd.Stats
}

// sampleEtcd reads the member's sizes every 100 ms until ctx ends (the
// storm's end, d from now), keeping the peaks of the first and last
// windows w, and prints progress every minute.
func (x *run) sampleEtcd(ctx context.Context, e *embedetcd.Server, d, w time.Duration, moved *atomic.Int64) etcdSamples {
	st0 := e.Stats()
	s := etcdSamples{rev0: st0.Revision, stats0: st0}
	start := time.Now()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	next := start.Add(time.Minute)
	for {
		select {
		case <-ctx.Done():
			return s
		case now := <-t.C:
			st := e.Stats()
			el := now.Sub(start)
			if el <= w {
				s.first, s.firstN = max(s.first, st.DBSizeInUse), s.firstN+1
			}
			if el >= d-w {
				s.last, s.lastN = max(s.last, st.DBSizeInUse), s.lastN+1
			}
			s.file = max(s.file, st.DBSize)
			s.noSpace = s.noSpace || st.NoSpace
			if now.After(next) {
				x.step("scale: etcd: %s: %d relocations; db in use %.1f MiB, file %.1f MiB; %d compactions, %d defragmentations",
					el.Round(time.Second), moved.Load(), mib(st.DBSizeInUse), mib(st.DBSize), st.Compactions-st0.Compactions, st.Defrags-st0.Defrags)
				next = next.Add(time.Minute)
			}
		}
	}
}
