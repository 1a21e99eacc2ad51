package hosted

import (
	"context"
	"fmt"
	"runtime/metrics"
	"slices"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/lifecycle"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Memory limits (pkg/lifecycle pressure.go; docs/developing/lifecycle.md):
// the node's sweep looks at what it holds every pressureTick; over the
// soft bound it puts its least recently used objects that may sleep to
// sleep, and at the hard bound it says it is full (its owner descriptor:
// placement sends new objects elsewhere) and refuses new objects.

// pressureTick is how often a node with limits looks at its load.
const pressureTick = time.Second

// pressure is what the node knows of its load between looks.
type pressure struct {
	heap   atomic.Int64  // bytes of live heap at the last GC
	cycles atomic.Uint64 // GC cycles when objects were last shed for memory
	full   atomic.Bool
}

func (n *Env) limits() lifecycle.Limits {
	return lifecycle.Limits{MaxObjects: n.cfg.MaxObjects, MaxBytes: n.cfg.MemoryLimit}
}

// heapSample reads the live heap (as of the last GC: what objects hold,
// not garbage yet to be collected) and the GC cycles so far.
func heapSample() (live int64, cycles uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = int64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		cycles = s[1].Value.Uint64()
	}
	return live, cycles
}

// RefuseNew is the answer of a node at a hard limit asked to take an
// object (a first call, a wake, a recovery), or nil when it may: objects
// is how many it holds, the new one included. The refusal says another
// node may take it (Elsewhere): gateways and clients retry there.
func (n *Env) RefuseNew(name string, objects int) *pb.CallReply {
	l := n.limits()
	if !l.Enabled() {
		return nil
	}
	ld := lifecycle.Load{Objects: objects - 1, Bytes: n.press.heap.Load()}
	if l.Level(ld) != lifecycle.Hard {
		return nil
	}
	n.metrics.Lifecycle.Refusals.Inc()
	n.setFull(true)
	return &pb.CallReply{Code: pb.Code_CODE_RESOURCE_EXHAUSTED, Elsewhere: true, Message: fmt.Sprintf(
		"node %s is at its limits (%d objects of --max-objects %d; %d heap bytes of --memory-limit %d): it takes no new object (%s); another node will",
		n.self.ID, ld.Objects, l.MaxObjects, ld.Bytes, l.MaxBytes, name)}
}

// Full reports whether the node is at a memory limit's hard bound.
func (n *Env) Full() bool { return n.press.full.Load() }

// setFull records whether the node is full and, on a change, tells the
// node (its owner descriptor says so: placement passes it by).
func (n *Env) setFull(full bool) {
	if n.press.full.Swap(full) != full {
		n.metrics.Lifecycle.Full.Set(map[bool]float64{false: 0, true: 1}[full])
		n.node.SetFull(full)
	}
}

// relieve is one look at the load: objects is what the node holds. Over
// the soft bound it puts to sleep the least recently used objects that may
// (lifecycle.Judge with Pressed: idleness does not count), as many as
// lifecycle.Limits.Shed says; for memory, only once a GC has run since the
// last shedding (the live heap is known at GCs only).
func (n *Env) relieve(ctx context.Context, objs []*Object, now time.Time) {
	l := n.limits()
	live, cycles := heapSample()
	n.press.heap.Store(live)
	ld := lifecycle.Load{Objects: len(objs), Bytes: live}
	level := l.Level(ld)
	n.setFull(level == lifecycle.Hard)
	if level == lifecycle.Under {
		return
	}
	byObjects := l.Shed(lifecycle.Load{Objects: ld.Objects})
	shed := byObjects
	if l.MaxBytes > 0 && cycles > n.press.cycles.Load() {
		shed = max(shed, l.Shed(ld))
	}
	if shed <= 0 {
		return
	}
	type cand struct {
		h    *Object
		used int64
	}
	cands := make([]cand, 0, len(objs))
	for _, h := range objs {
		if h.MaySleep(now, true) == lifecycle.Sleep {
			cands = append(cands, cand{h, h.used.Load()})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return int(min(max(a.used-b.used, -1), 1)) })
	pick := make([]*Object, 0, min(shed, len(cands)))
	for _, c := range cands[:min(shed, len(cands))] {
		pick = append(pick, c.h)
	}
	if shed > byObjects {
		n.press.cycles.Store(cycles)
	}
	n.metrics.Lifecycle.Shed.Add(float64(len(pick)))
	n.log.Info().Int("objects", ld.Objects).Int64("heapBytes", live).Str("level", level.String()).Int("shed", len(pick)).
		Int("couldSleep", len(cands)).Msg("over the memory limits: least recently used objects put to sleep")
	n.sleepAll(ctx, pick, true)
}
