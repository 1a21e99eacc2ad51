package reloclog

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Metrics are the node's relocation metrics a Reporter counts in.
type Metrics struct {
	Chunks, Bytes prometheus.Counter
	Interruption  prometheus.Histogram
	Relocations   *prometheus.CounterVec // role, outcome
}

// Reporter is the relocator's Reporter of one relocation: its status
// record, the node's metrics and log. It is called on the run's goroutine.
type Reporter struct {
	rec    *Record
	role   string
	m      *Metrics
	log    zerolog.Logger
	now    func() time.Time
	sealed time.Time // source: when the seal happened (zero: not sealed)
	// sealedUs is the target's copy of the source's seal time (PREPARE).
	sealedUs func() int64
	tr       *relocTrace // nil: not traced (trace.go)
}

// NewSourceReporter reports a source's relocation into rec.
func NewSourceReporter(rec *Record, m *Metrics, log zerolog.Logger, now func() time.Time) *Reporter {
	return &Reporter{rec: rec, role: "source", m: m, log: log, now: now}
}

// NewTargetReporter reports a target's relocation into rec; sealedUs is
// the source's seal time its PREPARE carried.
func NewTargetReporter(rec *Record, m *Metrics, log zerolog.Logger, now func() time.Time, sealedUs func() int64) *Reporter {
	return &Reporter{rec: rec, role: "target", m: m, log: log, now: now, sealedUs: sealedUs}
}

// Phase notes the relocation's phase.
func (r *Reporter) Phase(p string) { r.rec.Set(func(s *pb.RelocationStatus) { s.Phase = p }) }

// Enter makes the reporter the relocator's Timeline: the status keeps each
// step's start (a step entered again, as the state of a pre-copy, keeps its
// first).
func (r *Reporter) Enter(step string, at time.Time) {
	r.traceStep(step, at)
	us := at.UnixMicro()
	r.rec.Set(func(s *pb.RelocationStatus) {
		if n := len(s.Timeline); n > 0 && s.Timeline[n-1].GetStep() == step {
			return
		}
		s.Timeline = append(s.Timeline, &pb.TimelineMark{Step: step, UnixUs: us})
	})
}

// Sealed notes the seal and the payload's size.
func (r *Reporter) Sealed(at time.Time, size int) {
	r.sealed = at
	r.rec.Set(func(s *pb.RelocationStatus) { s.PayloadBytes, s.SealedUnixUs = uint64(size), at.UnixMicro() })
}

// Chunk counts one STATE chunk streamed.
func (r *Reporter) Chunk(size int) {
	r.m.Chunks.Inc()
	r.m.Bytes.Add(float64(size))
	if r.role != "source" {
		return
	}
	before := r.sealed.IsZero()
	r.rec.Set(func(s *pb.RelocationStatus) {
		if before {
			s.PrecopyBytes += uint64(size)
		} else {
			s.SealedBytes += uint64(size)
		}
	})
}

// Admitted ends the interruption: on the source from its seal (the
// node's histogram), on the target from the seal time PREPARE carried.
func (r *Reporter) Admitted(at time.Time) {
	if r.role == "source" {
		if !r.sealed.IsZero() {
			d := at.Sub(r.sealed)
			r.observeInterruption(d)
			r.rec.Set(func(s *pb.RelocationStatus) { s.InterruptionUs = d.Microseconds() })
		}
		return
	}
	sealed := r.sealedUs()
	r.rec.Set(func(s *pb.RelocationStatus) {
		s.AdmittedUnixUs = at.UnixMicro()
		if sealed > 0 && at.UnixMicro() > sealed {
			s.InterruptionUs = at.UnixMicro() - sealed
		}
	})
}

// Finished notes the outcome.
func (r *Reporter) Finished(f relocation.Finish) {
	r.traceFinish(f)
	o := f.Outcome.String()
	r.m.Relocations.WithLabelValues(r.role, o).Inc()
	r.rec.Set(func(s *pb.RelocationStatus) {
		s.Phase, s.Outcome, s.Code, s.Message, s.EndedUnixMs = "done", o, f.Code, f.Message, r.now().UnixMilli()
	})
	if e := r.log.Debug(); e.Enabled() {
		st := r.rec.Snapshot()
		e.Str("relocation", IDString(st.GetRelocationId())).Str("role", r.role).Str("object", st.GetObject()).
			Str("outcome", o).Str("message", f.Message).Msg("relocation ended")
	}
}

// Failed logs a step the relocator refused.
func (r *Reporter) Failed(err error) {
	r.log.Warn().Err(err).Str("relocation", IDString(r.rec.Snapshot().GetRelocationId())).Str("role", r.role).Msg("relocation step refused")
}

// IDString is the relocation id b as text, "" when b is none.
func IDString(b []byte) string {
	id, err := wire.ParseRelocationIDBytes(b)
	if err != nil {
		return ""
	}
	return id.String()
}
