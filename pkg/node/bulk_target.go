package node

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// RelocateMany (PeerService) is the target side of a bulk move: every
// PREPARE on the stream is a stage of its own, admitted by newStage exactly
// as on a stream of its own (tombstones, the bounds on stages, TLS's
// peer), and all of them run in one relocator.BulkTarget. The bulk is
// listed as one relocation, its stages counted by outcome.
func (s *peerServer) RelocateMany(stream rpcpb.PeerService_RelocateManyServer) error {
	n := s.n
	bid := wire.NewRelocationID()
	rec := n.relocs.Track(&pb.RelocationStatus{RelocationId: bid[:], Object: "bulk", Target: n.self.String(), Role: "target",
		Phase: "bulk", StartedUnixMs: n.now().UnixMilli()})
	var objects, completed, aborted, failed atomic.Uint32
	defer func() {
		rec.Set(func(st *pb.RelocationStatus) {
			st.Phase, st.Outcome, st.EndedUnixMs = "done", "completed", n.now().UnixMilli()
			st.BulkObjects, st.BulkCompleted, st.BulkAborted, st.BulkFailed = objects.Load(), completed.Load(), aborted.Load(), failed.Load()
		})
		n.relocs.Untrack(rec)
	}()
	b := &relocator.BulkTarget{
		Self: n.self, Node: n.selfNode, Peer: &serverBulkPeer{s: stream},
		Clock: n.clock, Draining: n.draining.Load, Stop: n.stopping,
		MaxBatchBytes: wire.MaxMessageBytes - 64<<10,
		Late:          func(*pb.RelocationFrame) { n.metrics.LateFrames.Inc() },
		Stage: func(ev relocation.PrepareEvent, send func(*pb.RelocationFrame)) *relocator.BulkStage {
			st := n.newStage(stream.Context(), ev, true, send)
			if st == nil {
				return nil
			}
			k := objects.Add(1)
			rec.Set(func(s *pb.RelocationStatus) {
				s.BulkObjects = k
				if s.Source == "" {
					c := ev.Prepare.GetCoordinator()
					s.Source = fmt.Sprintf("%s@%d", c.GetOwnerId(), c.GetOwnerGeneration())
				}
			})
			rep := &bulkReporter{n: n, role: "target", sealedUs: st.m.SealedUnixUs}
			if st.err != nil {
				rep.Failed(st.err)
			}
			return &relocator.BulkStage{Machine: st.m, First: st.first, Store: st.store, Mailbox: st.mailbox, Report: rep,
				Ended: func() {
					st.end()
					switch rep.outcome {
					case relocation.Completed:
						completed.Add(1)
					case relocation.Aborted:
						aborted.Add(1)
					default:
						failed.Add(1)
					}
				}}
		},
	}
	b.Run(n.life)
	return nil
}

// serverBulkPeer is the target's end of a bulk stream: the handler's
// return ends it.
type serverBulkPeer struct {
	s rpcpb.PeerService_RelocateManyServer
}

func (p *serverBulkPeer) Send(fs []*pb.RelocationFrame) error {
	return p.s.Send(&pb.RelocationFrames{Frames: fs})
}

func (p *serverBulkPeer) Recv() ([]*pb.RelocationFrame, error) {
	m, err := p.s.Recv()
	if err != nil {
		return nil, err
	}
	return m.GetFrames(), nil
}

func (p *serverBulkPeer) Close() {}

// bulkReporter is the Reporter of one relocation of a bulk move: the
// node's metrics and log, and its outcome (the bulk is listed as one
// relocation; each object's outcome goes to whoever moved it).
type bulkReporter struct {
	n    *Node
	role string
	// sealed: the source's seal; sealedUs: the target's copy of it.
	sealed   time.Time
	sealedUs func() int64
	// What happened: its outcome and the interruption (seal to admission).
	outcome      relocation.Outcome
	code         pb.Code
	message      string
	interruption time.Duration
}

func (r *bulkReporter) Phase(string) {}

func (r *bulkReporter) Sealed(at time.Time, _ int) { r.sealed = at }

func (r *bulkReporter) Chunk(size int) {
	r.n.metrics.Chunks.Inc()
	r.n.metrics.Bytes.Add(float64(size))
}

func (r *bulkReporter) Admitted(at time.Time) {
	switch {
	case r.role == "source" && !r.sealed.IsZero():
		r.interruption = at.Sub(r.sealed)
		r.n.metrics.Interruption.Observe(r.interruption.Seconds())
	case r.role == "target" && r.sealedUs != nil:
		if us := r.sealedUs(); us > 0 && at.UnixMicro() > us {
			r.interruption = time.Duration(at.UnixMicro()-us) * time.Microsecond
		}
	}
}

func (r *bulkReporter) Finished(f relocation.Finish) {
	r.outcome, r.code, r.message = f.Outcome, f.Code, f.Message
	r.n.metrics.Relocations.WithLabelValues(r.role, f.Outcome.String()).Inc()
}

func (r *bulkReporter) Failed(err error) {
	r.n.log.Warn().Err(err).Str("role", r.role).Msg("bulk relocation step refused")
}
