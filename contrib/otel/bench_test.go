package purgatoryotel_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	purgatoryotel "github.com/purgatory-go/purgatory/contrib/otel"
	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// benchOp is the smallest useful operation.
type benchOp struct{ operation.Base }

func (*benchOp) TryComplete() bool { return false }
func (*benchOp) OnComplete()       {}
func (*benchOp) OnExpiration()     {}

type tpKey = operation.TopicPartitionKey

// dropSpans is a span exporter that drops what a batch processor hands it.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// observerCase is one way of observing a purgatory in BenchmarkObserverCost.
type observerCase struct {
	name string
	opts func(b *testing.B) []purgatory.Option
	// ctx is the context each operation parks with; nil for none.
	ctx context.Context
}

// BenchmarkObserverCost is the CPU per request of Kafka's performance
// workload C (examples/purgatory_perf -timeout 1000 -pct50 50: requests
// parked on three keys of 100 and completed early, long after their
// park, with their cache lines cold) under each observer, against no
// observer at all, in one run: blocks of 500 requests go to each
// purgatory in turn (each with 100,000 others pending), and the ratio
// reported for an observer is the median, over rounds, of its block's
// time over the unobserved block's in the same round, which cancels the
// machine's drift and spreads garbage collections evenly.
//
// The observers: a timing.Recorder (the time-in-purgatory histograms);
// purgatoryotel with the SDK's tracer (a batch processor, spans dropped
// at export) and meter (a manual reader), for requests whose span is not
// sampled, and for requests whose span is; and with a no-op meter, for
// unsampled requests, to single out the tracing. The traced requests carry
// their context (operation.WithContext), which untraced ones have no need
// for: its cost is counted in the OpenTelemetry rows.
func BenchmarkObserverCost(b *testing.B) {
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	sampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}))
	withOtel := func(metrics bool) func(b *testing.B) []purgatory.Option {
		return func(b *testing.B) []purgatory.Option {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropSpans{}))
			var mp metric.MeterProvider = noop.NewMeterProvider()
			if metrics {
				smp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				b.Cleanup(func() { _ = smp.Shutdown(context.Background()) })
				mp = smp
			}
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			obs, err := purgatoryotel.New("bench", purgatoryotel.WithTracerProvider(tp), purgatoryotel.WithMeterProvider(mp))
			if err != nil {
				b.Fatal(err)
			}
			return []purgatory.Option{purgatory.WithObserver(obs)}
		}
	}
	cases := []observerCase{
		{name: "none", opts: func(*testing.B) []purgatory.Option { return nil }},
		{name: "histogram", opts: func(*testing.B) []purgatory.Option {
			return []purgatory.Option{purgatory.WithObserver(new(timing.Recorder))}
		}},
		{name: "otel-unsampled", opts: withOtel(true), ctx: unsampled},
		{name: "otel-sampled", opts: withOtel(true), ctx: sampled},
		// Tracing alone (a no-op meter), for an unsampled request: what
		// is left is the context the operation carries and the purgatory's
		// clock reads and handle, not span work.
		{name: "otel-unsampled-nometrics", opts: withOtel(false), ctx: unsampled},
	}
	ps := make([]*purgatory.Purgatory[tpKey, *benchOp], len(cases))
	for i, c := range cases {
		p, err := purgatory.New[tpKey, *benchOp]("bench", c.opts(b)...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
		parkIdle(b, p, 100_000)
		ps[i] = p
	}
	const block, lag = 500, 50_000
	rings := make([][lag]*benchOp, len(cases))
	r := rand.New(rand.NewPCG(7, 7))
	blocks := make([][]time.Duration, len(cases))
	which, start := 0, time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%block == 0 && i > 0 {
			now := time.Now()
			blocks[which] = append(blocks[which], now.Sub(start))
			which, start = (which+1)%len(cases), now
		}
		var o *benchOp
		if ctx := cases[which].ctx; ctx != nil {
			o = newBenchOp(operation.WithContext(ctx))
		} else {
			o = newBenchOp()
		}
		if done, err := ps[which].TryCompleteElseWatch(o, tpKey{Topic: "c", Partition: r.Int32N(100)},
			tpKey{Topic: "c", Partition: r.Int32N(100)}, tpKey{Topic: "c", Partition: r.Int32N(100)}); err != nil || done {
			b.Fatal("not parked", err)
		}
		slot := &rings[which][i%lag]
		if old := *slot; old != nil && !old.ForceComplete() {
			b.Fatal("not completed")
		}
		*slot = o
	}
	rounds := len(blocks[len(cases)-1])
	if rounds == 0 {
		return // too few iterations to compare
	}
	b.ReportMetric(float64(median(blocks[0][:rounds]))/block, "none-ns/req")
	for k := 1; k < len(cases); k++ {
		ratios := make([]float64, rounds)
		for i := range rounds {
			ratios[i] = float64(blocks[k][i]) / float64(blocks[0][i])
		}
		b.ReportMetric(median(ratios), cases[k].name+"/none")
	}
}

func newBenchOp(opts ...operation.InitOption) *benchOp {
	o := &benchOp{}
	o.Init(o, 30*time.Second, opts...)
	return o
}

// parkIdle parks n operations with hour-long timeouts on keys of their
// own, so that they are pending but never checked.
func parkIdle(b *testing.B, p *purgatory.Purgatory[tpKey, *benchOp], n int) {
	b.Helper()
	r := rand.New(rand.NewPCG(5, 5))
	for range n {
		o := &benchOp{}
		o.Init(o, time.Hour)
		k := r.Int32N(int32(max(n/10, 1)))
		if _, err := p.TryCompleteElseWatch(o, tpKey{Topic: "idle", Partition: k},
			tpKey{Topic: "idle", Partition: k + 1}, tpKey{Topic: "idle", Partition: k + 2}); err != nil {
			b.Fatal(err)
		}
	}
}

func median[T int64 | float64 | time.Duration](v []T) T {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// BenchmarkUnsampledCallbacks is the span work an unsampled request costs
// the observer itself: Parked and Left, with a no-op meter so that only
// the tracing is measured.
func BenchmarkUnsampledCallbacks(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropSpans{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	obs, err := purgatoryotel.New("bench", purgatoryotel.WithTracerProvider(tp),
		purgatoryotel.WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	pk := purgatory.Park{Context: ctx, Operation: newBenchOp(), Keys: 3}
	d := purgatory.Departure{Outcome: purgatory.OutcomeEarly, Time: time.Millisecond, Tries: 2}
	b.ReportAllocs()
	for b.Loop() {
		obs.Left(obs.Parked(pk), d)
	}
}
