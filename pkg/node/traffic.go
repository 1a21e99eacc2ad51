package node

import (
	"context"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/traffic"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// nodeTraffic is the node's sketch of the messages its objects sent
// (pkg/traffic): the heaviest edges, for locationd's co-location mode
// (AdminService.Traffic), and the cross-node ratio gauge. One message in
// --traffic-sample is counted, weighted by the sample.
type nodeTraffic struct {
	mu     sync.Mutex
	s      *traffic.Sketch // nil until configured (New)
	sample uint64
	seen   uint64
}

func newNodeTraffic(cfg Config) nodeTraffic {
	return nodeTraffic{s: traffic.New(cfg.TrafficEdges, cfg.TrafficHalfLife.Milliseconds()), sample: uint64(max(cfg.TrafficSample, 1))}
}

func (t *nodeTraffic) observe(now time.Time, from, to string, cross bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen++
	if t.s == nil || t.seen%t.sample != 0 {
		return
	}
	t.s.Observe(now.UnixMilli(), from, to, t.sample, cross)
}

// snapshot is the sketch's heaviest edges (limit ≤ 0: all) and totals.
func (t *nodeTraffic) snapshot(now time.Time, limit int) *pb.TrafficReply {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &pb.TrafficReply{}
	if t.s == nil {
		return r
	}
	ms := now.UnixMilli()
	for _, e := range t.s.Top(ms, limit) {
		r.Edges = append(r.Edges, &pb.TrafficEdge{From: e.From, To: e.To, Count: e.Count})
	}
	r.Messages, r.CrossNode = t.s.Totals(ms)
	r.Capacity = uint32(t.s.Capacity())
	return r
}

func (t *nodeTraffic) crossRatioAt(now time.Time) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.s == nil {
		return 0
	}
	m, c := t.s.Totals(now.UnixMilli())
	if m == 0 {
		return 0
	}
	return float64(c) / float64(m)
}

// Traffic (AdminService) is the node's traffic sketch.
func (s *adminServer) Traffic(_ context.Context, r *pb.TrafficRequest) (*pb.TrafficReply, error) {
	return s.n.traffic.snapshot(s.n.now(), int(r.GetLimit())), nil
}

// Traffic is the node's traffic sketch (heaviest edges first; limit ≤ 0:
// all it keeps).
func (n *Node) Traffic(limit int) *pb.TrafficReply { return n.traffic.snapshot(n.now(), limit) }
