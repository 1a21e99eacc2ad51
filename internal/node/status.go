package node

import (
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

func (r *relocationRecord) snapshot() *pb.RelocationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return proto.Clone(r.st).(*pb.RelocationStatus)
}

func (n *Node) track(st *pb.RelocationStatus) *relocationRecord {
	rec := &relocationRecord{st: st}
	n.rmu.Lock()
	n.active[string(st.RelocationId)+st.Role] = rec
	n.rmu.Unlock()
	return rec
}

func (n *Node) untrack(rec *relocationRecord) {
	st := rec.snapshot()
	n.rmu.Lock()
	delete(n.active, string(st.RelocationId)+st.Role)
	n.recent = append(n.recent, st)
	if len(n.recent) > 256 {
		n.recent = n.recent[len(n.recent)-256:]
	}
	n.rmu.Unlock()
	n.noteChange() // a drain waits for target stages to end
}

// Relocations lists relocations in flight and the most recent ended ones.
func (n *Node) Relocations() []*pb.RelocationStatus {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	out := make([]*pb.RelocationStatus, 0, len(n.active)+len(n.recent))
	for _, r := range n.active {
		out = append(out, r.snapshot())
	}
	for _, st := range n.recent {
		out = append(out, proto.Clone(st).(*pb.RelocationStatus))
	}
	return out
}

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

func (r *reporter) Sealed(at time.Time, size int) {
	r.sealed = at
	r.rec.set(func(s *pb.RelocationStatus) { s.PayloadBytes, s.SealedUnixUs = uint64(size), at.UnixMicro() })
}

func (r *reporter) Chunk(size int) {
	r.n.metrics.chunks.Inc()
	r.n.metrics.bytes.Add(float64(size))
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
	st := r.rec.snapshot()
	r.n.log.Debug().Str("relocation", relocationIDString(st.GetRelocationId())).Str("role", r.role).Str("object", st.GetObject()).
		Str("outcome", o).Str("message", f.Message).Msg("relocation ended")
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
