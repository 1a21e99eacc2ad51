package reloclog

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/relocation"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// BulkReporter is the Reporter of one relocation of a bulk move: the
// node's metrics and log, and its outcome (the bulk is listed as one
// relocation; each object's outcome goes to whoever moved it).
type BulkReporter struct {
	m    *Metrics
	log  zerolog.Logger
	role string
	// sealed: the source's seal; sealedUs: the target's copy of it.
	sealed   time.Time
	sealedUs func() int64
	// What happened: its outcome and the interruption (seal to admission).
	finish       relocation.Finish
	interruption time.Duration
}

// NewBulkReporter reports one relocation of a bulk move as role (source,
// target); a target's sealedUs is the source's seal time its PREPARE
// carried.
func NewBulkReporter(role string, m *Metrics, log zerolog.Logger, sealedUs func() int64) *BulkReporter {
	return &BulkReporter{m: m, log: log, role: role, sealedUs: sealedUs}
}

// Finish is how the relocation ended (Outcome 0: it did not).
func (r *BulkReporter) Finish() relocation.Finish { return r.finish }

// Interruption is the time from its seal to its admission (0: unknown).
func (r *BulkReporter) Interruption() time.Duration { return r.interruption }

func (r *BulkReporter) Phase(string) {}

func (r *BulkReporter) Sealed(at time.Time, _ int) { r.sealed = at }

func (r *BulkReporter) Chunk(size int) {
	r.m.Chunks.Inc()
	r.m.Bytes.Add(float64(size))
}

func (r *BulkReporter) Admitted(at time.Time) {
	switch {
	case r.role == "source" && !r.sealed.IsZero():
		r.interruption = at.Sub(r.sealed)
		r.m.Interruption.Observe(r.interruption.Seconds())
	case r.role == "target" && r.sealedUs != nil:
		if us := r.sealedUs(); us > 0 && at.UnixMicro() > us {
			r.interruption = time.Duration(at.UnixMicro()-us) * time.Microsecond
		}
	}
}

func (r *BulkReporter) Finished(f relocation.Finish) {
	r.finish = f
	r.m.Relocations.WithLabelValues(r.role, f.Outcome.String()).Inc()
}

func (r *BulkReporter) Failed(err error) {
	r.log.Warn().Err(err).Str("role", r.role).Msg("bulk relocation step refused")
}

// CountingIn is r, also counting the bulk's relocations as each ends in
// rec, the bulk's listed status.
func (r *BulkReporter) CountingIn(rec *Record) relocator.Reporter {
	return &countingReporter{BulkReporter: r, rec: rec}
}

type countingReporter struct {
	*BulkReporter
	rec *Record
}

func (r *countingReporter) Finished(f relocation.Finish) {
	r.BulkReporter.Finished(f)
	r.rec.Set(func(s *pb.RelocationStatus) {
		switch f.Outcome {
		case relocation.Completed:
			s.BulkCompleted++
		case relocation.Aborted:
			s.BulkAborted++
		default:
			s.BulkFailed++
		}
	})
}
