package node

import (
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// relocationRecord is the status of one relocation on this node (either
// role), as ListRelocations shows it.
type relocationRecord struct {
	mu sync.Mutex
	st *pb.RelocationStatus
}

func (r *relocationRecord) set(f func(*pb.RelocationStatus)) {
	r.mu.Lock()
	f(r.st)
	r.mu.Unlock()
}

// id is the relocation's id.
func (r *relocationRecord) id() wire.RelocationID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var id wire.RelocationID
	copy(id[:], r.st.RelocationId)
	return id
}

func (r *relocationRecord) snapshot() *pb.RelocationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return proto.Clone(r.st).(*pb.RelocationStatus)
}

// relocationLog is the node's relocations, in flight (by id and role)
// and the last 256 that ended.
type relocationLog struct {
	mu     sync.Mutex
	active map[string]*relocationRecord
	recent []*pb.RelocationStatus
	// ended is called after a relocation ended (a drain waits for target
	// stages to end).
	ended func()
	// hub hears each relocation start and end (WatchEvents; events.go).
	hub *eventHub
}

func newRelocationLog(ended func()) *relocationLog {
	return &relocationLog{active: map[string]*relocationRecord{}, ended: ended}
}

func (l *relocationLog) track(st *pb.RelocationStatus) *relocationRecord {
	rec := &relocationRecord{st: st}
	l.mu.Lock()
	l.active[string(st.RelocationId)+st.Role] = rec
	l.mu.Unlock()
	if l.hub != nil {
		l.hub.publishRelocation(rec.snapshot)
	}
	return rec
}

func (l *relocationLog) untrack(rec *relocationRecord) {
	st := rec.snapshot()
	l.mu.Lock()
	delete(l.active, string(st.RelocationId)+st.Role)
	l.recent = append(l.recent, st)
	if len(l.recent) > 256 {
		l.recent = l.recent[len(l.recent)-256:]
	}
	l.mu.Unlock()
	if l.hub != nil {
		l.hub.publishRelocation(func() *pb.RelocationStatus { return cloneStatus(st) })
	}
	l.ended()
}

// list is every relocation in flight, then the recent ended ones.
func (l *relocationLog) list() []*pb.RelocationStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*pb.RelocationStatus, 0, len(l.active)+len(l.recent))
	for _, r := range l.active {
		out = append(out, r.snapshot())
	}
	for _, st := range l.recent {
		out = append(out, proto.Clone(st).(*pb.RelocationStatus))
	}
	return out
}

// inFlight counts the relocations in flight in role.
func (l *relocationLog) inFlight(role string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := 0
	for key := range l.active {
		if strings.HasSuffix(key, role) {
			k++
		}
	}
	return k
}

// Relocations lists relocations in flight and the most recent ended ones.
func (n *Node) Relocations() []*pb.RelocationStatus { return n.relocs.list() }

// reporter is the relocator's Reporter of one relocation: its status
// record, the node's metrics and log. It is called on the run's goroutine.
type reporter struct {
	n      *Node
	rec    *relocationRecord
	role   string
	sealed time.Time // source: when the seal happened (zero: not sealed)
	// sealedUs is the target's copy of the source's seal time (PREPARE).
	sealedUs func() int64
}

func (r *reporter) Phase(p string) { r.rec.set(func(s *pb.RelocationStatus) { s.Phase = p }) }

// Enter makes the reporter the relocator's Timeline: the status keeps each
// step's start (a step entered again, as the state of a pre-copy, keeps its
// first).
func (r *reporter) Enter(step string, at time.Time) {
	us := at.UnixMicro()
	r.rec.set(func(s *pb.RelocationStatus) {
		if n := len(s.Timeline); n > 0 && s.Timeline[n-1].GetStep() == step {
			return
		}
		s.Timeline = append(s.Timeline, &pb.TimelineMark{Step: step, UnixUs: us})
	})
}

func (r *reporter) Sealed(at time.Time, size int) {
	r.sealed = at
	r.rec.set(func(s *pb.RelocationStatus) { s.PayloadBytes, s.SealedUnixUs = uint64(size), at.UnixMicro() })
}

func (r *reporter) Chunk(size int) {
	r.n.metrics.chunks.Inc()
	r.n.metrics.bytes.Add(float64(size))
	if r.role != "source" {
		return
	}
	before := r.sealed.IsZero()
	r.rec.set(func(s *pb.RelocationStatus) {
		if before {
			s.PrecopyBytes += uint64(size)
		} else {
			s.SealedBytes += uint64(size)
		}
	})
}

// Admitted ends the interruption: on the source from its seal (the
// node's histogram), on the target from the seal time PREPARE carried.
func (r *reporter) Admitted(at time.Time) {
	if r.role == "source" {
		if !r.sealed.IsZero() {
			d := at.Sub(r.sealed)
			r.n.metrics.interruption.Observe(d.Seconds())
			r.rec.set(func(s *pb.RelocationStatus) { s.InterruptionUs = d.Microseconds() })
		}
		return
	}
	sealed := r.sealedUs()
	r.rec.set(func(s *pb.RelocationStatus) {
		s.AdmittedUnixUs = at.UnixMicro()
		if sealed > 0 && at.UnixMicro() > sealed {
			s.InterruptionUs = at.UnixMicro() - sealed
		}
	})
}

func (r *reporter) Finished(f relocation.Finish) {
	o := f.Outcome.String()
	r.n.metrics.relocations.WithLabelValues(r.role, o).Inc()
	r.rec.set(func(s *pb.RelocationStatus) {
		s.Phase, s.Outcome, s.Code, s.Message, s.EndedUnixMs = "done", o, f.Code, f.Message, r.n.now().UnixMilli()
	})
	if e := r.n.log.Debug(); e.Enabled() {
		st := r.rec.snapshot()
		e.Str("relocation", relocationIDString(st.GetRelocationId())).Str("role", r.role).Str("object", st.GetObject()).
			Str("outcome", o).Str("message", f.Message).Msg("relocation ended")
	}
}

func (r *reporter) Failed(err error) {
	r.n.log.Warn().Err(err).Str("relocation", relocationIDString(r.rec.snapshot().GetRelocationId())).Str("role", r.role).Msg("relocation step refused")
}

func relocationIDString(b []byte) string {
	id, err := wire.ParseRelocationIDBytes(b)
	if err != nil {
		return ""
	}
	return id.String()
}
