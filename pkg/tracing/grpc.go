package tracing

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
)

// The gRPC methods otelgrpc traces: an operator's requests to a node
// (relocate, drain, groups) and the relocation streams between nodes, so
// that a relocation's trace crosses from source to target in the stream's
// metadata. Calls are not among them: a gateway's forwards to one owner,
// and a client's calls to one node, share one long-lived stream, so a
// call carries its trace context in its own message (CallRequest's
// traceparent). Watches and session streams live as long as a connection
// and would make one span of hours.
var traced = filters.Any(
	filters.All(filters.ServiceName("meshloc.rpc.v1.AdminService"), filters.Not(filters.MethodName("WatchEvents"))),
	filters.FullMethodName("/meshloc.rpc.v1.PeerService/Relocate"),
	filters.FullMethodName("/meshloc.rpc.v1.PeerService/RelocateMany"),
)

// ServerOptions are the gRPC server options that trace a node's admin
// requests and incoming relocation streams (none when tracing is off).
func ServerOptions() []grpc.ServerOption {
	if !on.Load() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(traced)))}
}

// DialOptions are the dial options that trace the same methods on the
// client's side and carry the caller's trace context to the node (none
// when tracing is off).
func DialOptions() []grpc.DialOption {
	if !on.Load() {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithFilter(traced)))}
}
