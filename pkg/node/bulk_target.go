package node

import (
	"fmt"
	"sync/atomic"

	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/node/peers"
	"github.com/meshloc/meshloc/pkg/node/reloclog"
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
		Self: n.self, Node: n.selfNode, Peer: peers.ServeBulk(stream),
		Clock: n.clock, Draining: n.draining.Load, Stop: n.stopping,
		MaxBatchBytes: wire.MaxMessageBytes - 64<<10,
		Late:          func(*pb.RelocationFrame) { n.metrics.LateFrames.Inc() },
		Intents:       n.store,
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
			rep := reloclog.NewBulkReporter("target", n.relocMetrics, n.log, st.m.SealedUnixUs)
			if st.err != nil {
				rep.Failed(st.err)
			}
			return &relocator.BulkStage{Machine: st.m, First: st.first, Store: st.store, Mailbox: st.mailbox, Report: rep,
				Ended: func() {
					st.end()
					switch rep.Finish().Outcome {
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
	ctx, endTrace := reloclog.BulkTrace(n.life, reloclog.Parent(stream.Context()), "target", 0)
	defer endTrace()
	b.Run(ctx)
	return nil
}
