package purgatoryotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/purgatory-go/purgatory/purgatory"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/purgatory-go/purgatory/contrib/otel"

// SpanName is the name of the span that covers an operation's stay.
const SpanName = "purgatory.wait"

// Attribute keys, on spans and metrics.
const (
	// NameKey is the purgatory's name: Produce, Fetch, ...
	NameKey = attribute.Key("purgatory.name")
	// OutcomeKey is how an operation left: purgatory.Outcome's String.
	OutcomeKey = attribute.Key("purgatory.outcome")
	// KeysKey is how many keys an operation was watched on (spans only).
	KeysKey = attribute.Key("purgatory.keys")
	// TriesKey is how many TryComplete calls an operation took (spans only).
	TriesKey = attribute.Key("purgatory.tries")
)

// ErrNilSource is returned by RegisterStats for a nil Source.
var ErrNilSource = errors.New("purgatoryotel: nil source")

// Source is what RegisterStats reads: a *purgatory.Purgatory[K, T] of any
// K and T, or anything else that reports Stats.
type Source interface {
	Stats() purgatory.Stats
}

// Observer is a purgatory.Observer that traces each parked operation and
// records its time in purgatory; RegisterStats adds the purgatory's
// counters and gauges. Make one per purgatory with New.
//
// An Observer is safe for concurrent use by multiple goroutines.
type Observer struct {
	// Set by New, then only read.
	tracer    trace.Tracer
	roots     bool
	startOpts []trace.SpanStartOption
	name      attribute.KeyValue
	meter     metric.Meter
	time      metric.Float64Histogram
	// recordOpts are the attributes of each outcome's measurements, made
	// once so that a Record allocates nothing.
	recordOpts [purgatory.Outcomes][]metric.RecordOption
	outcomes   [purgatory.Outcomes]attribute.KeyValue
}

var _ purgatory.Observer = (*Observer)(nil)

// Option configures an Observer.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp    trace.TracerProvider
	mp    metric.MeterProvider
	roots bool
}

// WithTracerProvider sets where spans go. The default is otel's global
// TracerProvider at New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets where metrics go. The default is otel's global
// MeterProvider at New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithRootSpans traces operations whose context carries no span, as
// roots, if the TracerProvider's sampler samples them. By default only an
// operation whose context carries a sampled span is traced: a wait is
// part of a request, and a root span of its own says little.
func WithRootSpans() Option { return optionFunc(func(c *config) { c.roots = true }) }

// timeBounds are the time-in-purgatory histogram's bucket bounds, in
// seconds: the powers of two of nanoseconds from 2^13 (8.192µs) to 2^37
// (about 137s), as contrib/prometheus's default, and for the same reason:
// each is a bound of contrib/timing's buckets, and a fetch's 500 ms max
// wait sits between two of them rather than in a bucket of minutes.
func timeBounds() []float64 {
	var b []float64
	for e := 13; e <= 37; e++ {
		b = append(b, (time.Duration(1) << e).Seconds())
	}
	return b
}

// New returns an Observer for the purgatory named name; install it with
// purgatory.WithObserver, and register the purgatory's Stats with
// RegisterStats once it is made. It fails only if the meter refuses the
// time-in-purgatory histogram.
func New(name string, opts ...Option) (*Observer, error) {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	o := &Observer{
		tracer: c.tp.Tracer(ScopeName),
		roots:  c.roots,
		name:   NameKey.String(name),
		meter:  c.mp.Meter(ScopeName),
	}
	o.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(o.name)}
	var err error
	o.time, err = o.meter.Float64Histogram("purgatory.time_in_purgatory",
		metric.WithUnit("s"),
		metric.WithDescription("Time operations spent parked, from TryCompleteElseWatch to completion, "+
			"by outcome: early, expired, context, shutdown or for_key "+
			"(the purgatory's share of Kafka's request metric RemoteTimeMs)."),
		metric.WithExplicitBucketBoundaries(timeBounds()...))
	if err != nil {
		return nil, err
	}
	for k := range purgatory.Outcome(purgatory.Outcomes) {
		o.outcomes[k] = OutcomeKey.String(k.String())
		o.recordOpts[k] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(o.name, o.outcomes[k]))}
	}
	return o, nil
}

// Parked starts the operation's span, a child of the span in its context,
// if that span is sampled (or, with WithRootSpans, if there is none and
// the sampler says so). An operation that is not traced costs a lookup of
// its context's span and nothing more.
func (o *Observer) Parked(p purgatory.Park) any {
	// The sampled flag first: for an unsampled request that is the one
	// test made, where checking the IDs' validity first cost a fifth of
	// the callbacks' time (BenchmarkUnsampledCallbacks: 24.6 against 28.7 ns, medians of 6).
	sc := trace.SpanContextFromContext(p.Context)
	if !sc.IsSampled() {
		if !o.roots || sc.IsValid() {
			return nil // no parent to follow, or the parent's sampler said no
		}
	} else if !sc.IsValid() && !o.roots {
		return nil
	}
	_, span := o.tracer.Start(p.Context, SpanName, o.startOpts...)
	if !span.IsRecording() {
		return nil // nothing to End: a span not recorded has no effect
	}
	span.SetAttributes(KeysKey.Int(p.Keys))
	return span
}

// Left records the time in purgatory under the outcome (cancelled
// operations are not timed, as in contrib/prometheus) and ends the span,
// if there is one, with the outcome and the tries as attributes. Its
// status is Error for an expiry, a shutdown, and a CompleteForKey with a
// cause, each with the cause as description: the request fails. A
// context that ended and a cancel leave it unset: the wait was given up
// by its caller, whose own span says why.
func (o *Observer) Left(state any, d purgatory.Departure) {
	if d.Outcome < purgatory.OutcomeCancelled {
		o.time.Record(context.Background(), d.Time.Seconds(), o.recordOpts[d.Outcome]...)
	}
	span, ok := state.(trace.Span)
	if !ok {
		return
	}
	span.SetAttributes(o.outcomes[d.Outcome], TriesKey.Int(d.Tries))
	switch d.Outcome {
	case purgatory.OutcomeExpired, purgatory.OutcomeShutdown, purgatory.OutcomeForKey:
		if d.Cause != nil {
			span.SetStatus(codes.Error, d.Cause.Error())
		}
	}
	span.End()
}

// Refused adds an event, purgatory.refused with the error, to the span in
// the refused operation's context, if it is recording. The refusals are
// counted in the purgatory's Stats (purgatory.full).
func (o *Observer) Refused(p purgatory.Park, err error) {
	span := trace.SpanFromContext(p.Context)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("purgatory.refused", trace.WithAttributes(o.name, attribute.String("error", err.Error())))
}
