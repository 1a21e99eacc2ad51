// Package tracing is meshloc's OpenTelemetry tracing: its configuration
// (the standard OTEL_* environment variables, and flags that mirror them),
// the process's tracer, and the few helpers the drivers call to start a
// span, carry W3C trace context in a message, and put a sampled trace's id
// on a histogram observation as an exemplar.
//
// Tracing is off unless a collector endpoint is configured. Off, nothing is
// installed: every helper returns at once after one atomic load, without
// allocating, and no message carries trace context.
//
// What is traced, and how the spans join up across nodes, is in
// docs/operating/tracing.md.
package tracing

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ErrConfig: a tracing setting (flag or OTEL_* variable) that cannot work,
// such as an unknown sampler or a ratio outside [0, 1]. Nothing was
// installed.
var ErrConfig = errors.New("tracing: invalid configuration")

// Config is how a process traces. Each field left empty falls back to its
// standard environment variable; an empty endpoint there too leaves tracing
// off.
type Config struct {
	// Endpoint is the OTLP/gRPC collector's URL (http://collector:4317;
	// https:// for TLS). Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then
	// OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string
	// Sampler is one of the standard sampler names (always_on, always_off,
	// traceidratio, parentbased_always_on, parentbased_always_off,
	// parentbased_traceidratio). Empty: OTEL_TRACES_SAMPLER, then
	// parentbased_always_on.
	Sampler string
	// SamplerArg is the ratio of the *traceidratio samplers. Empty:
	// OTEL_TRACES_SAMPLER_ARG, then 1.
	SamplerArg string
	// Service is the service.name of the spans (OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES win over it).
	Service string
}

// AddFlags registers --otel-endpoint, --otel-sampler and
// --otel-sampler-arg on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Endpoint, "otel-endpoint", c.Endpoint, "OTLP/gRPC collector URL traces go to (http://host:4317; empty: $OTEL_EXPORTER_OTLP_ENDPOINT; both empty: tracing off)")
	fs.StringVar(&c.Sampler, "otel-sampler", c.Sampler, "trace sampler: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio (empty: $OTEL_TRACES_SAMPLER, then parentbased_always_on)")
	fs.StringVar(&c.SamplerArg, "otel-sampler-arg", c.SamplerArg, "the traceidratio samplers' ratio, 0..1 (empty: $OTEL_TRACES_SAMPLER_ARG, then 1)")
}

// env is the process's environment (tests replace it).
var env = os.LookupEnv

func orEnv(v string, keys ...string) string {
	if v != "" {
		return v
	}
	for _, k := range keys {
		if s, ok := env(k); ok && strings.TrimSpace(s) != "" {
			return strings.TrimSpace(s)
		}
	}
	return ""
}

// Enabled says whether c turns tracing on: an endpoint is configured and
// OTEL_SDK_DISABLED is not true.
func (c Config) Enabled() bool {
	if v, _ := env("OTEL_SDK_DISABLED"); strings.EqualFold(strings.TrimSpace(v), "true") {
		return false
	}
	return c.endpoint() != ""
}

func (c Config) endpoint() string {
	return orEnv(c.Endpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
}

// Validate checks the sampler and its argument (the endpoint is the
// exporter's to check).
func (c Config) Validate() error {
	_, err := c.sampler()
	return err
}

// sampler is the sampler c names.
func (c Config) sampler() (sdktrace.Sampler, error) {
	name := strings.ToLower(orEnv(c.Sampler, "OTEL_TRACES_SAMPLER"))
	arg := orEnv(c.SamplerArg, "OTEL_TRACES_SAMPLER_ARG")
	ratio := 1.0
	if arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 || r != r {
			return nil, fmt.Errorf("%w: sampler argument %q: want a ratio from 0 to 1", ErrConfig, arg)
		}
		ratio = r
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, fmt.Errorf("%w: sampler %q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", ErrConfig, name)
}

// Setup turns tracing on as c says, for a process of the given service
// instance (a node's name; empty: none): an OTLP/gRPC exporter behind a
// batch processor, installed as otel's global tracer provider with the
// W3C trace context propagator. With tracing not Enabled it installs
// nothing. The returned shutdown flushes what is buffered; call it once, on
// the way out.
func Setup(ctx context.Context, c Config, instance string) (shutdown func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	if !c.Enabled() {
		return nothing, nil
	}
	sampler, err := c.sampler()
	if err != nil {
		return nothing, err
	}
	var opts []otlptracegrpc.Option
	if c.Endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nothing, fmt.Errorf("%w: OTLP exporter: %w", ErrConfig, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cmpOr(c.Service, "meshloc"))}
	if instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", instance))
	}
	res, err := resource.Merge(resource.NewSchemaless(attrs...), resource.Environment())
	if err != nil {
		res = resource.NewSchemaless(attrs...)
	}
	tp := NewProvider(sampler, sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	restore := Use(tp)
	return func(ctx context.Context) error {
		defer restore()
		return tp.Shutdown(ctx)
	}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Use installs tp as the process's tracer provider and turns tracing on,
// with the W3C trace context propagator: what Setup does with the
// exporter it builds, and what a test or an embedding program does with a
// provider of its own (the SDK's in-memory exporter, say; a Provider
// lets StartSampled skip the spans its sampler drops). The returned
// restore puts back what was there before.
func Use(tp trace.TracerProvider) (restore func()) {
	prevTP, prevProp, prevOn, prevBox := otel.GetTracerProvider(), otel.GetTextMapPropagator(), on.Load(), tracer.Load()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	box := &tracerBox{t: tp.Tracer(Scope)}
	if p, ok := tp.(*Provider); ok {
		box.sampler = p.sampler
	}
	tracer.Store(box)
	on.Store(true)
	return func() {
		on.Store(prevOn)
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		if prevBox == nil {
			prevBox = &tracerBox{t: prevTP.Tracer(Scope)}
		}
		tracer.Store(prevBox)
	}
}
