package main

import (
	"context"
	"io"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	purgatoryotel "github.com/purgatory-go/purgatory/contrib/otel"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// With -trace, the scenario's produce requests are traced: a produce span
// for the whole request, and under it the purgatory.wait span
// (contrib/otel) of its stay in the produce purgatory, written to w as
// JSON by OpenTelemetry's stdout exporter. ratio of the requests are
// sampled; the wait spans follow their request's decision.
func startTracing(w io.Writer, ratio float64) (stop func(), err error) {
	exp, err := stdouttrace.New(stdouttrace.WithWriter(w), stdouttrace.WithPrettyPrint())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	otel.SetTracerProvider(tp)
	return func() { _ = tp.Shutdown(context.Background()) }, nil
}

// produceObservers is what NewBroker installs on the produce purgatory
// when tracing: an observer that traces each parked produce under its
// request's span, through otel's global TracerProvider.
func produceObservers(trace bool) ([]purgatory.Option, error) {
	if !trace {
		return nil, nil
	}
	obs, err := purgatoryotel.New("Produce")
	if err != nil {
		return nil, err
	}
	return []purgatory.Option{purgatory.WithObserver(obs)}, nil
}

// startProduceSpan starts a produce request's span and returns the context
// the request parks with, or nil when not tracing.
func startProduceSpan(tracing bool) (context.Context, trace.Span) {
	if !tracing {
		return nil, trace.SpanFromContext(context.Background()) // a span that does nothing
	}
	return otel.Tracer("produce_fetch").Start(context.Background(), "produce")
}

// withContext ties an operation to ctx, if there is one.
func withContext(ctx context.Context) []operation.InitOption {
	if ctx == nil {
		return nil
	}
	return []operation.InitOption{operation.WithContext(ctx)}
}
