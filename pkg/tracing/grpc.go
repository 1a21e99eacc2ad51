package tracing

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Traced says whether a gRPC method is traced: an operator's requests to
// a node (relocate, drain, groups) and the relocation streams between
// nodes, so that a relocation's trace crosses from source to target in
// the stream's metadata. Calls are not among them: a gateway's forwards to
// one owner, and a client's calls to one node, share one long-lived
// stream, so a call carries its trace context in its own message
// (CallRequest's traceparent). Watches and session streams live as long
// as a connection and would make one span of hours.
func Traced(fullMethod string) bool {
	switch fullMethod {
	case "/meshloc.rpc.v1.PeerService/Relocate", "/meshloc.rpc.v1.PeerService/RelocateMany":
		return true
	case "/meshloc.rpc.v1.AdminService/WatchEvents":
		return false
	}
	return strings.HasPrefix(fullMethod, "/meshloc.rpc.v1.AdminService/")
}

// These are interceptors, not otelgrpc's stats handler: gRPC hands a stats
// handler every message of every stream, the call streams' included, and
// builds an event for each (measured: 2 to 3 % of a node's calls a second
// at 1 % sampling, with no span made). An interceptor runs once per RPC,
// and for the call streams, once per stream. The spans follow otelgrpc's
// conventions: named after the method, rpc.* attributes, the W3C trace
// context in the metadata.

// ServerOptions are the gRPC server options that trace a node's admin
// requests and incoming relocation streams (none when tracing is off).
func ServerOptions() []grpc.ServerOption {
	if !on.Load() {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(serverUnary), grpc.ChainStreamInterceptor(serverStream)}
}

// DialOptions are the dial options that trace the same methods on the
// client's side and carry the caller's trace context to the node (none
// when tracing is off).
func DialOptions() []grpc.DialOption {
	if !on.Load() {
		return nil
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(clientUnary), grpc.WithChainStreamInterceptor(clientStream)}
}

func serverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !Traced(info.FullMethod) {
		return handler(ctx, req)
	}
	ctx, span := startRPC(extract(ctx), info.FullMethod, trace.SpanKindServer)
	resp, err := handler(ctx, req)
	endRPC(span, err)
	return resp, err
}

func serverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !Traced(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, span := startRPC(extract(ss.Context()), info.FullMethod, trace.SpanKindServer)
	err := handler(srv, &serverStreamIn{ServerStream: ss, ctx: ctx})
	endRPC(span, err)
	return err
}

// serverStreamIn is a server stream whose Context holds the RPC's span.
type serverStreamIn struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStreamIn) Context() context.Context { return s.ctx }

func clientUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !Traced(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	ctx, span := startRPC(ctx, method, trace.SpanKindClient)
	err := invoker(inject(ctx), method, req, reply, cc, opts...)
	endRPC(span, err)
	return err
}

func clientStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if !Traced(method) {
		return streamer(ctx, desc, cc, method, opts...)
	}
	ctx, span := startRPC(ctx, method, trace.SpanKindClient)
	cs, err := streamer(inject(ctx), desc, cc, method, opts...)
	if err != nil {
		endRPC(span, err)
		return nil, err
	}
	s := &clientStreamOut{ClientStream: cs, span: span}
	// gRPC ends a stream's context once the stream is over (an error or
	// io.EOF from RecvMsg, or the caller's context ending): so does the
	// span, with the error RecvMsg saw.
	context.AfterFunc(cs.Context(), s.end)
	return s, nil
}

// clientStreamOut is a client stream that ends its RPC's span with it.
type clientStreamOut struct {
	grpc.ClientStream
	span trace.Span
	mu   sync.Mutex
	err  error // RecvMsg's, other than io.EOF
	once sync.Once
}

func (s *clientStreamOut) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}
	return err
}

func (s *clientStreamOut) end() {
	s.once.Do(func() {
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		endRPC(s.span, err)
	})
}

// startRPC starts the span of an RPC to or from fullMethod, named as
// otelgrpc names it.
func startRPC(ctx context.Context, fullMethod string, kind trace.SpanKind) (context.Context, trace.Span) {
	name := strings.TrimPrefix(fullMethod, "/")
	service, method, _ := strings.Cut(name, "/")
	return Start(ctx, name, kind, attribute.String("rpc.system", "grpc"),
		attribute.String("rpc.service", service), attribute.String("rpc.method", method))
}

// endRPC ends span with the RPC's status code.
func endRPC(span trace.Span, err error) {
	code := status.Code(err)
	span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(code)))
	if err != nil {
		Fail(span, code.String()+": "+status.Convert(err).Message())
	}
	span.End()
}

var propagator = propagation.TraceContext{}

// extract is ctx with the remote span the incoming metadata's traceparent
// names (a malformed one is ignored).
func extract(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	return propagator.Extract(ctx, metadataCarrier(md))
}

// inject is ctx with its span's traceparent in the outgoing metadata.
func inject(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	propagator.Inject(ctx, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

// metadataCarrier is gRPC metadata as a propagation.TextMapCarrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
