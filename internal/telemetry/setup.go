package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Config configures Setup.
type Config struct {
	// ServiceName is the default service.name (OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES override it).
	ServiceName string
	// ServiceInstanceID becomes service.instance.id.
	ServiceInstanceID string
	// SpanExporter overrides the exporter chosen from the environment (tests).
	SpanExporter sdktrace.SpanExporter
	// Logger receives set-up warnings; nil discards them.
	Logger *slog.Logger
}

// Providers are the tracer and meter providers of one service, with the
// Prometheus registry that the meter provider's exporter feeds.
type Providers struct {
	Tracer   *sdktrace.TracerProvider
	Meter    *sdkmetric.MeterProvider
	Registry *prometheus.Registry
	// Exporting reports whether spans leave the process (an exporter is set).
	Exporting bool
}

// Setup builds the providers. Spans go to the exporter named by the standard
// variables: OTEL_TRACES_EXPORTER (otlp or none), OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL
// (grpc or http/protobuf, the default) and the other OTEL_EXPORTER_OTLP_*
// settings the exporters read themselves; with none of them set no exporter
// is installed. OTEL_SDK_DISABLED=true disables export. OTEL_TRACES_SAMPLER
// is honoured by the SDK. Every span id comes from IDGenerator.
func Setup(ctx context.Context, cfg Config) (*Providers, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = "sandboxio"
	}
	attrs := []resource.Option{
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)),
		resource.WithFromEnv(),
	}
	if cfg.ServiceInstanceID != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceInstanceID(cfg.ServiceInstanceID)))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}

	exp := cfg.SpanExporter
	if exp == nil {
		exp, err = SpanExporterFromEnv(ctx)
		if err != nil {
			return nil, err
		}
	}
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithIDGenerator(IDGenerator{})}
	if exp != nil {
		topts = append(topts, sdktrace.WithBatcher(exp))
	}
	p := &Providers{Tracer: sdktrace.NewTracerProvider(topts...), Exporting: exp != nil}

	p.Registry = prometheus.NewRegistry()
	p.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pe, err := otelprom.New(otelprom.WithRegisterer(p.Registry), otelprom.WithoutScopeInfo())
	if err != nil {
		_ = p.Tracer.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	p.Meter = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(pe))
	log.Debug("telemetry ready", "exporting_spans", p.Exporting)
	return p, nil
}

// SpanExporterFromEnv returns the OTLP span exporter the OTEL_* variables
// ask for, or nil when they ask for none.
func SpanExporterFromEnv(ctx context.Context) (sdktrace.SpanExporter, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch e := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))); e {
	case "none":
		return nil, nil
	case "otlp":
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
	default:
		return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q is not supported (use otlp or none)", e)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q is not supported (use grpc or http/protobuf)", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
	}
	return exp, nil
}

// MetricsHandler serves the Prometheus text format of p's registry.
func (p *Providers) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(p.Registry, promhttp.HandlerOpts{})
}

// Shutdown flushes and stops both providers.
func (p *Providers) Shutdown(ctx context.Context) error {
	return errors.Join(p.Tracer.Shutdown(ctx), p.Meter.Shutdown(ctx))
}

// ServeMetrics serves h on addr at /metrics until ctx ends.
func ServeMetrics(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("telemetry: metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if log != nil {
		log.Info("metrics listening", "addr", ln.Addr().String())
	}
	select {
	case <-ctx.Done():
		// Shutdown is teardown: the caller's values, not its cancellation.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("telemetry: metrics server: %w", err)
	}
}
