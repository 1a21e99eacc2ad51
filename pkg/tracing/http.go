package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// InjectHTTP puts ctx's traceparent on an HTTP request's header (nothing
// when tracing is off or ctx has no span).
func InjectHTTP(ctx context.Context, h http.Header) {
	if tp := Traceparent(ctx); tp != "" {
		h.Set("traceparent", tp)
	}
}

// FromHTTP is r's context with the span its traceparent header names as
// the remote parent (ignored when malformed; r's context when tracing is
// off).
func FromHTTP(r *http.Request) context.Context {
	if !on.Load() {
		return r.Context()
	}
	return WithTraceparent(r.Context(), r.Header.Get("traceparent"))
}

// Handler traces h's requests: each a server span "meshloc.api " + route
// (the route's pattern, never its raw path), a child of the caller's
// traceparent, that the work the request starts (a relocation, a drain)
// continues. With tracing off when it is made, it is h itself.
func Handler(route string, h http.Handler) http.Handler {
	if !on.Load() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := Start(FromHTTP(r), "meshloc.api "+route, trace.SpanKindServer,
			attribute.String("http.request.method", r.Method), attribute.String("http.route", route))
		defer span.End()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}
