package purgatoryotel_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	purgatoryotel "github.com/purgatory-go/purgatory/contrib/otel"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// testOp completes once ready is set and it is checked.
type testOp struct {
	operation.Base
	ready     atomic.Bool
	completed chan struct{}
}

func newOp(timeout time.Duration, opts ...operation.InitOption) *testOp {
	o := &testOp{completed: make(chan struct{})}
	o.Init(o, timeout, opts...)
	return o
}

func (o *testOp) TryComplete() bool {
	if o.ready.Load() {
		return o.ForceComplete()
	}
	return false
}

func (o *testOp) OnComplete()   { close(o.completed) }
func (o *testOp) OnExpiration() {}

var discard = slog.New(slog.DiscardHandler)

// harness is a purgatory observed by a purgatoryotel.Observer whose spans
// go to an in-memory recorder and whose metrics to a manual reader.
type harness struct {
	p      *purgatory.Purgatory[string, *testOp]
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
}

func newHarness(t *testing.T, name string, popts []purgatory.Option, oopts ...purgatoryotel.Option) *harness {
	t.Helper()
	h := &harness{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		assert.NoError(t, h.tp.Shutdown(context.Background()))
		assert.NoError(t, mp.Shutdown(context.Background()))
	})
	obs, err := purgatoryotel.New(name, append([]purgatoryotel.Option{
		purgatoryotel.WithTracerProvider(h.tp), purgatoryotel.WithMeterProvider(mp)}, oopts...)...)
	require.NoError(t, err)
	h.p, err = purgatory.New[string, *testOp](name, append([]purgatory.Option{
		purgatory.WithLogger(discard), purgatory.WithObserver(obs)}, popts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, h.p.Shutdown(context.Background())) })
	reg, err := obs.RegisterStats(h.p)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, reg.Unregister()) })
	return h
}

// request starts a request's span, the parent of its operation's.
func (h *harness) request(ctx context.Context) (context.Context, trace.Span) {
	return h.tp.Tracer("test").Start(ctx, "request")
}

func park(t *testing.T, p *purgatory.Purgatory[string, *testOp], op *testOp, keys ...string) {
	t.Helper()
	done, err := p.TryCompleteElseWatch(op, keys...)
	require.NoError(t, err)
	require.False(t, done, "completed instead of parking")
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// Each parked operation whose request is traced gets one span, a child of
// the request's, named purgatory.wait, ended when it leaves, with its
// purgatory, keys, outcome and tries; its status is Error, with the cause,
// for an expiry, a shutdown and a CompleteForKey with a cause, and unset
// for an early completion, a context that ended and a cancel.
func TestSpanPerParkedOperation(t *testing.T) {
	mt := timer.NewMockTimer()
	h := newHarness(t, "Produce", []purgatory.Option{purgatory.WithTimer(mt), purgatory.WithoutReaper()})
	reqCtx, req := h.request(context.Background())
	opCtx, cancel := context.WithCancel(reqCtx)
	defer cancel()
	errMoved := errors.New("not leader")

	early, expired := newOp(time.Hour, operation.WithContext(reqCtx)), newOp(50*time.Millisecond, operation.WithContext(reqCtx))
	byCtx := newOp(time.Hour, operation.WithContext(opCtx))
	forKey, cancelled := newOp(time.Hour, operation.WithContext(reqCtx)), newOp(time.Hour, operation.WithContext(reqCtx))
	atShutdown := newOp(time.Hour, operation.WithContext(reqCtx))
	park(t, h.p, early, "a", "b", "c")
	park(t, h.p, expired, "d")
	park(t, h.p, byCtx, "e")
	park(t, h.p, forKey, "f")
	park(t, h.p, cancelled, "g")
	park(t, h.p, atShutdown, "h")
	assert.Empty(t, h.spans.Ended(), "no span ends at park")
	require.Len(t, h.spans.Started(), 1+6, "the request's and one per operation")

	h.p.CheckAndComplete("a")
	early.ready.Store(true)
	require.Equal(t, 1, h.p.CheckAndComplete("b"))
	mt.Advance(50 * time.Millisecond)
	cancel()
	<-byCtx.completed
	require.Equal(t, 1, h.p.CompleteForKey("f", errMoved))
	require.Len(t, h.p.CancelForKey("g"), 1)
	require.NoError(t, h.p.Shutdown(context.Background()))
	req.End()

	type want struct {
		outcome string
		tries   int64
		status  codes.Code
		desc    string
	}
	wants := map[string]want{
		"early":     {"early", 3, codes.Unset, ""},
		"expired":   {"expired", 1, codes.Error, operation.ErrExpired.Error()},
		"context":   {"context", 1, codes.Unset, ""},
		"for_key":   {"for_key", 1, codes.Error, "not leader"},
		"cancelled": {"cancelled", 1, codes.Unset, ""},
		"shutdown":  {"shutdown", 1, codes.Error, purgatory.ErrShutdown.Error()},
	}
	got := map[string]want{}
	for _, s := range h.spans.Ended() {
		if s.Name() == "request" {
			continue
		}
		assert.Equal(t, purgatoryotel.SpanName, s.Name())
		assert.Equal(t, trace.SpanKindInternal, s.SpanKind())
		assert.Equal(t, req.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the request's span")
		assert.Equal(t, req.SpanContext().TraceID(), s.SpanContext().TraceID())
		a := attrs(s.Attributes())
		assert.Equal(t, "Produce", a[purgatoryotel.NameKey].AsString())
		o := a[purgatoryotel.OutcomeKey].AsString()
		got[o] = want{o, a[purgatoryotel.TriesKey].AsInt64(), s.Status().Code, s.Status().Description}
		if o == "early" {
			assert.Equal(t, int64(3), a[purgatoryotel.KeysKey].AsInt64())
		}
	}
	assert.Equal(t, wants, got)
	assert.Len(t, h.spans.Ended(), 1+6)
}

// Sampling is the parent's: an operation whose request span is not sampled
// gets no span, nor does one with no span in its context, unless
// WithRootSpans asks for roots (which the sampler then decides).
func TestSamplingFollowsTheParent(t *testing.T) {
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: 0,
	}))
	sampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{3}, SpanID: trace.SpanID{4}, TraceFlags: trace.FlagsSampled,
	}))
	for _, c := range []struct {
		name  string
		roots bool
		ctx   context.Context
		spans int
	}{
		{"unsampled parent", false, unsampled, 0},
		{"unsampled parent, roots", true, unsampled, 0},
		{"sampled remote parent", false, sampled, 1},
		{"no parent", false, context.Background(), 0},
		{"no parent, roots", true, context.Background(), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var oopts []purgatoryotel.Option
			if c.roots {
				oopts = append(oopts, purgatoryotel.WithRootSpans())
			}
			h := newHarness(t, "Fetch", []purgatory.Option{purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper()}, oopts...)
			op := newOp(time.Hour, operation.WithContext(c.ctx))
			park(t, h.p, op, "k")
			op.ForceComplete()
			assert.Len(t, h.spans.Ended(), c.spans)
			assert.Len(t, h.spans.Started(), c.spans)
		})
	}
}

// A refusal is an event on the refused request's span.
func TestRefusalIsAnEventOnTheRequest(t *testing.T) {
	h := newHarness(t, "Produce", []purgatory.Option{purgatory.WithTimer(timer.NewMockTimer()),
		purgatory.WithoutReaper(), purgatory.WithMaxPending(1)})
	ctx, req := h.request(context.Background())
	park(t, h.p, newOp(time.Hour), "k")
	_, err := h.p.TryCompleteElseWatch(newOp(time.Hour, operation.WithContext(ctx)), "k")
	require.ErrorIs(t, err, purgatory.ErrFull)
	req.End()
	require.Len(t, h.spans.Ended(), 1)
	ev := h.spans.Ended()[0].Events()
	require.Len(t, ev, 1)
	assert.Equal(t, "purgatory.refused", ev[0].Name)
	assert.Equal(t, purgatory.ErrFull.Error(), attrs(ev[0].Attributes)["error"].AsString())
}

// collect reads h's metrics: each gauge and counter by name, and each
// time-in-purgatory histogram point by outcome.
func (h *harness) collect(t *testing.T) (map[string]int64, map[string]metricdata.HistogramDataPoint[float64], map[string]string) {
	t.Helper()
	// assert, not require: it also runs on a goroutine of its own.
	var rm metricdata.ResourceMetrics
	assert.NoError(t, h.reader.Collect(context.Background(), &rm))
	nums := map[string]int64{}
	hists := map[string]metricdata.HistogramDataPoint[float64]{}
	units := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, purgatoryotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !assert.Len(t, d.DataPoints, 1, m.Name) {
					continue
				}
				nums[m.Name] = d.DataPoints[0].Value
				v, _ := d.DataPoints[0].Attributes.Value(purgatoryotel.NameKey)
				assert.NotEmpty(t, v.AsString())
				if m.Name == "purgatory.size" || m.Name == "purgatory.delayed_operations" {
					assert.False(t, d.IsMonotonic, m.Name)
				} else {
					assert.True(t, d.IsMonotonic, m.Name)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					o, _ := dp.Attributes.Value(purgatoryotel.OutcomeKey)
					hists[o.AsString()] = dp
				}
			default:
				t.Errorf("%s: unexpected %T", m.Name, m.Data)
			}
		}
	}
	return nums, hists, units
}

// The metrics have contrib/prometheus's names and meaning: the gauges and
// counters are the purgatory's Stats, and the time-in-purgatory histogram,
// in seconds, holds each completion's exact time (on the MockTimer's
// clock) under its outcome; cancels are not timed.
func TestMetricsMatchStats(t *testing.T) {
	mt := timer.NewMockTimer()
	h := newHarness(t, "Produce", []purgatory.Option{purgatory.WithTimer(mt), purgatory.WithoutReaper(),
		purgatory.WithMaxPending(4)})
	a, b, c, d := newOp(time.Hour), newOp(100*time.Millisecond), newOp(time.Hour), newOp(time.Hour)
	park(t, h.p, a, "a", "x")
	park(t, h.p, b, "b")
	park(t, h.p, c, "c")
	park(t, h.p, d, "d", "y")
	_, err := h.p.TryCompleteElseWatch(newOp(time.Hour), "e")
	require.ErrorIs(t, err, purgatory.ErrFull)
	mt.Advance(20 * time.Millisecond)
	a.ForceComplete()
	mt.Advance(80 * time.Millisecond) // b expires
	require.Equal(t, 1, h.p.CompleteForKey("c", errors.New("moved")))
	e := newOp(time.Hour)
	park(t, h.p, e, "z")
	require.Len(t, h.p.CancelForKey("z"), 1)

	nums, hists, units := h.collect(t)
	st := h.p.Stats()
	assert.Equal(t, map[string]int64{
		"purgatory.size": 2, "purgatory.delayed_operations": 1,
		"purgatory.expires": 1, "purgatory.completed_early": 1, "purgatory.context_done": 0,
		"purgatory.expired_by_shutdown": 0, "purgatory.completed_for_key": 1, "purgatory.cancelled": 1,
		"purgatory.purged": int64(st.Purged), "purgatory.panics": 0, "purgatory.full": 1,
	}, nums)
	assert.Equal(t, "s", units["purgatory.time_in_purgatory"])
	assert.Equal(t, "{entry}", units["purgatory.size"])
	assert.Equal(t, "{operation}", units["purgatory.expires"])
	require.Len(t, hists, 3, "early, expired and for_key: the cancel is not timed")
	for outcome, sum := range map[string]float64{"early": 0.02, "expired": 0.1, "for_key": 0.1} {
		dp := hists[outcome]
		assert.Equal(t, uint64(1), dp.Count, outcome)
		assert.InDelta(t, sum, dp.Sum, 1e-12, outcome)
		require.Len(t, dp.Bounds, 25)
		assert.Equal(t, (time.Duration(1) << 13).Seconds(), dp.Bounds[0])
		v, _ := dp.Attributes.Value(purgatoryotel.NameKey)
		assert.Equal(t, "Produce", v.AsString())
	}
}
