package mtls

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Authorizer checks the verified identity of each RPC's peer against the
// Action the RPC needs (actionOf, by full method name; false: not an RPC
// of this server, refused): Unauthenticated without an identity,
// PermissionDenied for a role that may not (Allowed).
type Authorizer func(fullMethod string) (Action, bool)

func (actionOf Authorizer) authorize(ctx context.Context, fullMethod string) error {
	id, err := PeerIdentity(ctx)
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	a, ok := actionOf(fullMethod)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "mtls: %s is not an RPC of this node", fullMethod)
	}
	if err := Allowed(id, a); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}

// ServerOptions are the interceptors that authorize every unary and
// streaming RPC.
func (actionOf Authorizer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := actionOf.authorize(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := actionOf.authorize(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}
