package node

import (
	"context"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// trafficReply is the node's traffic sketch (--traffic-edges,
// --traffic-half-life, --traffic-sample): the heaviest edges of the
// messages its objects sent, for locationd's co-location mode, and the
// totals (limit ≤ 0: every edge kept).
func (n *Node) trafficReply(limit int) *pb.TrafficReply {
	edges, messages, cross, capacity := n.traffic.Snapshot(n.now(), limit)
	r := &pb.TrafficReply{Messages: messages, CrossNode: cross, Capacity: uint32(capacity)}
	for _, e := range edges {
		r.Edges = append(r.Edges, &pb.TrafficEdge{From: e.From, To: e.To, Count: e.Count})
	}
	return r
}

// Traffic (AdminService) is the node's traffic sketch.
func (s *adminServer) Traffic(_ context.Context, r *pb.TrafficRequest) (*pb.TrafficReply, error) {
	return s.n.trafficReply(int(r.GetLimit())), nil
}

// Traffic is the node's traffic sketch (heaviest edges first; limit ≤ 0:
// all it keeps).
func (n *Node) Traffic(limit int) *pb.TrafficReply { return n.trafficReply(limit) }
