package node

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// The node's gRPC port also serves the standard health service
// (grpc.health.v1, for grpc_health_probe and Kubernetes gRPC probes) and
// server reflection (for grpcurl). Health is SERVING only while the node
// serves: from the moment it advertises serving until it drains, is
// fenced or stops; NOT_SERVING before and after. The status is kept for the
// empty service name (the whole node) and for each meshloc service.

// healthServices are the names the health service answers for, besides "".
var healthServices = []string{
	"meshloc.rpc.v1.CallService", "meshloc.rpc.v1.PeerService",
	"meshloc.rpc.v1.AdminService", "meshloc.rpc.v1.SessionService",
}

// registerHealth adds health and reflection to s, NOT_SERVING until
// updateHealth says otherwise.
func (n *Node) registerHealth(s *grpc.Server) {
	n.health = health.NewServer()
	n.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s, n.health)
	reflection.Register(s)
}

func (n *Node) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	if n.health == nil {
		return
	}
	n.health.SetServingStatus("", st)
	for _, svc := range healthServices {
		n.health.SetServingStatus(svc, st)
	}
}

// updateHealth sets the health status from the node's state: called at
// each change of it (serving, draining, fenced, stopping).
func (n *Node) updateHealth() {
	n.mu.Lock()
	closing := n.closing
	n.mu.Unlock()
	st := healthpb.HealthCheckResponse_SERVING
	select {
	case <-n.Fenced():
		st = healthpb.HealthCheckResponse_NOT_SERVING
	default:
	}
	if closing || n.draining.Load() || !n.serving.Load() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	n.setHealth(st)
}
