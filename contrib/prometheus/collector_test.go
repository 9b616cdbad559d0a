package purgatoryprom_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	purgatoryprom "github.com/purgatory-go/purgatory/contrib/prometheus"
	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// testOp completes once ready is set and it is checked (Kafka's
// MockDelayedOperation). OnComplete closes completed, so a test can wait
// for a completion that happens on another goroutine (a context's).
type testOp struct {
	operation.Base
	ready     atomic.Bool
	panics    bool // OnComplete panics after closing completed
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

func (o *testOp) OnComplete() {
	close(o.completed)
	if o.panics {
		panic("test: OnComplete panics")
	}
}

func (o *testOp) OnExpiration() {}

var discard = slog.New(slog.DiscardHandler)

// timedPurgatory is a purgatory and the timing.Recorder that observes it.
type timedPurgatory struct {
	*purgatory.Purgatory[string, *testOp]
	times *timing.Recorder
}

// timed is the option that has Collector.Add export p's times.
func (p *timedPurgatory) timed() purgatoryprom.AddOption { return purgatoryprom.WithTimes(p.times) }

// newPurgatory returns a purgatory on a MockTimer with no reaper, so that
// time moves only with mt.Advance and durations in purgatory are exact,
// timed by a Recorder. It is shut down when the test ends.
func newPurgatory(t *testing.T, name string, opts ...purgatory.Option) (*timedPurgatory, *timer.MockTimer) {
	t.Helper()
	mt := timer.NewMockTimer()
	times := new(timing.Recorder)
	opts = append([]purgatory.Option{
		purgatory.WithTimer(mt), purgatory.WithoutReaper(), purgatory.WithLogger(discard),
		purgatory.WithObserver(times),
	}, opts...)
	p, err := purgatory.New[string, *testOp](name, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Shutdown(context.Background())) })
	return &timedPurgatory{p, times}, mt
}

// park parks op, which must not complete at once.
func park(t *testing.T, p *timedPurgatory, op *testOp, keys ...string) {
	t.Helper()
	done, err := p.TryCompleteElseWatch(op, keys...)
	require.NoError(t, err)
	require.False(t, done, "completed instead of parking")
}

// complete marks op ready and checks key, which must complete it.
func complete(t *testing.T, p *timedPurgatory, op *testOp, key string) {
	t.Helper()
	op.ready.Store(true)
	require.Equal(t, 1, p.CheckAndComplete(key))
}

// outcomeDurations lists what one live purgatory went through, for the
// histogram checks: purgatory/outcome -> times in purgatory.
type outcomeDurations map[string][]time.Duration

// exercise drives two purgatories through every way an operation can end,
// on mock time, and returns them with the durations they recorded.
//
// Produce ends with one operation pending on two keys, and has counted
// 3 early completions (0, 10ms, 20ms), 1 expiry (100ms), 1 context end
// (8ms), 1 cancel, 2 purged entries, 1 refusal and 1 panic. Fetch has
// been shut down with two operations pending (50ms each).
func exercise(t *testing.T) (produce, fetch *timedPurgatory, want outcomeDurations) {
	produce, mt := newPurgatory(t, "Produce", purgatory.WithMaxPending(3), purgatory.WithPurgeInterval(0))

	// t=0: one completes inside TryCompleteElseWatch, in no time.
	now := newOp(time.Second)
	now.ready.Store(true)
	done, err := produce.TryCompleteElseWatch(now, "p0")
	require.NoError(t, err)
	require.True(t, done)

	// a on three keys completes through one at t=10ms, leaving dead
	// entries on the other two, which outnumber the one live entry (b's):
	// the purge takes them.
	a, b := newOp(100*time.Millisecond), newOp(100*time.Millisecond)
	park(t, produce, a, "p0", "p1", "p2")
	park(t, produce, b, "p0")
	mt.Advance(10 * time.Millisecond)
	complete(t, produce, a, "p0")
	produce.AdvanceClock(0)
	require.EqualValues(t, 2, produce.Stats().Purged)

	// t=100ms: b's timeout.
	require.Equal(t, 1, mt.Advance(90*time.Millisecond))

	// Three parked fill WithMaxPending(3); a fourth is refused.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, d, f := newOp(time.Second), newOp(time.Second), newOp(time.Second, operation.WithContext(ctx))
	park(t, produce, c, "q0")
	park(t, produce, d, "q1", "q2")
	park(t, produce, f, "q3")
	_, err = produce.TryCompleteElseWatch(newOp(time.Second), "q4")
	require.ErrorIs(t, err, purgatory.ErrFull)

	// t=108ms: f's context ends; the completion runs on the context's
	// goroutine and is counted before OnComplete runs. 8ms lies in the
	// last library bucket below 2^23ns, which le=2^23ns must include.
	mt.Advance(8 * time.Millisecond)
	cancel()
	<-f.completed

	require.Equal(t, []*testOp{c}, produce.CancelForKey("q0"))

	// g's OnComplete panics when it completes at t=128ms.
	g := newOp(time.Second)
	g.panics = true
	park(t, produce, g, "q5")
	mt.Advance(20 * time.Millisecond)
	complete(t, produce, g, "q5")

	fetch, fmt := newPurgatory(t, "Fetch")
	park(t, fetch, newOp(500*time.Millisecond), "f0")
	park(t, fetch, newOp(500*time.Millisecond), "f0")
	fmt.Advance(50 * time.Millisecond)
	require.NoError(t, fetch.Shutdown(context.Background()))

	return produce, fetch, outcomeDurations{
		"Produce/early":   {0, 10 * time.Millisecond, 20 * time.Millisecond},
		"Produce/expired": {100 * time.Millisecond},
		"Produce/context": {8 * time.Millisecond},
		"Fetch/shutdown":  {50 * time.Millisecond, 50 * time.Millisecond},
	}
}

// The gauges and counters of two purgatories are exported under Kafka's
// names, labelled by purgatory, with the values their Stats hold.
func TestCollectorExportsStats(t *testing.T) {
	produce, fetch, _ := exercise(t)
	c := purgatoryprom.NewCollector()
	require.NoError(t, c.Add("Produce", produce, produce.timed()))
	require.NoError(t, c.Add("Fetch", fetch, fetch.timed()))

	const want = `
# HELP purgatory_size Watch entries of pending operations, one for each key an operation watches (Kafka's PurgatorySize; Kafka's also counts completed operations until a purge).
# TYPE purgatory_size gauge
purgatory_size{purgatory="Fetch"} 0
purgatory_size{purgatory="Produce"} 2
# HELP purgatory_delayed_operations Operations parked and not yet completed or cancelled (Kafka's NumDelayedOperations).
# TYPE purgatory_delayed_operations gauge
purgatory_delayed_operations{purgatory="Fetch"} 0
purgatory_delayed_operations{purgatory="Produce"} 1
# HELP purgatory_expires_total Operations completed by their timeout (Kafka's ExpiresPerSec, here a counter).
# TYPE purgatory_expires_total counter
purgatory_expires_total{purgatory="Fetch"} 0
purgatory_expires_total{purgatory="Produce"} 1
# HELP purgatory_completed_early_total Operations completed before their timeout by TryComplete or ForceComplete, including those TryCompleteElseWatch completed without parking.
# TYPE purgatory_completed_early_total counter
purgatory_completed_early_total{purgatory="Fetch"} 0
purgatory_completed_early_total{purgatory="Produce"} 3
# HELP purgatory_context_done_total Operations completed because the context given to operation.WithContext ended.
# TYPE purgatory_context_done_total counter
purgatory_context_done_total{purgatory="Fetch"} 0
purgatory_context_done_total{purgatory="Produce"} 1
# HELP purgatory_expired_by_shutdown_total Pending operations expired by Shutdown.
# TYPE purgatory_expired_by_shutdown_total counter
purgatory_expired_by_shutdown_total{purgatory="Fetch"} 2
purgatory_expired_by_shutdown_total{purgatory="Produce"} 0
# HELP purgatory_cancelled_total Operations taken out by CancelForKey, with no callback run.
# TYPE purgatory_cancelled_total counter
purgatory_cancelled_total{purgatory="Fetch"} 0
purgatory_cancelled_total{purgatory="Produce"} 1
# HELP purgatory_purged_total Watch entries of completed operations removed by the purge (Kafka's purgeCompleted).
# TYPE purgatory_purged_total counter
purgatory_purged_total{purgatory="Fetch"} 0
purgatory_purged_total{purgatory="Produce"} 2
# HELP purgatory_panics_total Panics recovered in operations' callbacks and in expiry.
# TYPE purgatory_panics_total counter
purgatory_panics_total{purgatory="Fetch"} 0
purgatory_panics_total{purgatory="Produce"} 1
# HELP purgatory_full_total Operations refused with ErrFull because WithMaxPending operations were pending.
# TYPE purgatory_full_total counter
purgatory_full_total{purgatory="Fetch"} 0
purgatory_full_total{purgatory="Produce"} 1
`
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want),
		"purgatory_size", "purgatory_delayed_operations", "purgatory_expires_total",
		"purgatory_completed_early_total", "purgatory_context_done_total",
		"purgatory_expired_by_shutdown_total", "purgatory_cancelled_total",
		"purgatory_purged_total", "purgatory_panics_total", "purgatory_full_total"))
}

// histograms gathers c through a pedantic registry and returns its
// time-in-purgatory histograms by purgatory/outcome.
func histograms(t *testing.T, c prometheus.Collector) map[string]*dto.Histogram {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := make(map[string]*dto.Histogram)
	for _, mf := range mfs {
		if mf.GetName() != "purgatory_time_in_purgatory_seconds" {
			continue
		}
		require.Equal(t, dto.MetricType_HISTOGRAM, mf.GetType())
		for _, m := range mf.GetMetric() {
			l := make(map[string]string)
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out[l["purgatory"]+"/"+l["outcome"]] = m.GetHistogram()
		}
	}
	return out
}

// The default buckets are the powers of two of nanoseconds from 2^13 to
// 2^37, and with the MockTimer every figure is exact: each bucket counts
// the durations strictly below its bound (the bounds are the library's,
// so nothing is lost), _count counts them all and _sum adds them up.
// Every outcome of every purgatory is exported, empty ones included.
func TestHistogramCountsAreExact(t *testing.T) {
	produce, fetch, want := exercise(t)
	c := purgatoryprom.NewCollector()
	require.NoError(t, c.Add("Produce", produce, produce.timed()))
	require.NoError(t, c.Add("Fetch", fetch, fetch.timed()))

	bounds := purgatoryprom.DefaultBuckets()
	require.Len(t, bounds, 25)
	assert.Equal(t, 8192*time.Nanosecond, bounds[0])
	assert.Equal(t, time.Duration(1)<<37, bounds[24])

	got := histograms(t, c)
	require.Len(t, got, 10, "2 purgatories x 5 outcomes")
	for _, p := range []string{"Produce", "Fetch"} {
		for _, o := range []string{"early", "expired", "context", "shutdown"} {
			key := p + "/" + o
			t.Run(key, func(t *testing.T) {
				h := got[key]
				require.NotNil(t, h)
				ds := want[key]
				var sum time.Duration
				for _, d := range ds {
					sum += d
				}
				assert.EqualValues(t, len(ds), h.GetSampleCount(), "_count")
				assert.Equal(t, sum.Seconds(), h.GetSampleSum(), "_sum")
				require.Len(t, h.GetBucket(), len(bounds))
				for i, b := range h.GetBucket() {
					below := 0
					for _, d := range ds {
						if d < bounds[i] {
							below++
						}
					}
					assert.Equal(t, bounds[i].Seconds(), b.GetUpperBound())
					assert.EqualValues(t, below, b.GetCumulativeCount(), "le=%v", bounds[i])
				}
			})
		}
	}
}

// With WithBuckets, a bound that is a library bound (2^24ns) is exact; a
// round one (1ms, 10ms, 50ms) counts only the library buckets that end
// below it, so the 10ms operation, whose library bucket ends at 10.49ms,
// is not under le=0.01. An operation parked for exactly 2^24ns lies in the
// library bucket that starts there, so it is under le=0.05, not under
// le=0.016777216.
func TestWithBucketsCountsWholeLibraryBuckets(t *testing.T) {
	p, mt := newPurgatory(t, "Produce")
	now := newOp(time.Second)
	now.ready.Store(true)
	done, err := p.TryCompleteElseWatch(now, "k")
	require.NoError(t, err)
	require.True(t, done)
	at10, at20 := newOp(time.Second), newOp(time.Second)
	park(t, p, at10, "k10")
	park(t, p, at20, "k20")
	park(t, p, newOp(1<<24*time.Nanosecond), "exp")
	mt.Advance(10 * time.Millisecond)
	complete(t, p, at10, "k10")
	// Advance runs due tasks at the time it moves to, so stop exactly at
	// the deadline for the expiry to be timed at 2^24ns.
	require.Equal(t, 1, mt.Advance(1<<24-10*time.Millisecond))
	mt.Advance(20*time.Millisecond - 1<<24)
	complete(t, p, at20, "k20")

	bounds := []time.Duration{time.Millisecond, 10 * time.Millisecond, 1 << 24, 50 * time.Millisecond}
	c := purgatoryprom.NewCollector(purgatoryprom.WithBuckets(bounds...))
	bounds[0] = time.Hour // WithBuckets took a copy
	require.NoError(t, c.Add("Produce", p, p.timed()))

	const want = `
# HELP purgatory_time_in_purgatory_seconds Time operations spent parked, from TryCompleteElseWatch to completion, by outcome: early, expired, context, shutdown or for_key (the purgatory's share of Kafka's request metric RemoteTimeMs).
# TYPE purgatory_time_in_purgatory_seconds histogram
purgatory_time_in_purgatory_seconds_bucket{outcome="early",purgatory="Produce",le="0.001"} 1
purgatory_time_in_purgatory_seconds_bucket{outcome="early",purgatory="Produce",le="0.01"} 1
purgatory_time_in_purgatory_seconds_bucket{outcome="early",purgatory="Produce",le="0.016777216"} 2
purgatory_time_in_purgatory_seconds_bucket{outcome="early",purgatory="Produce",le="0.05"} 3
purgatory_time_in_purgatory_seconds_bucket{outcome="early",purgatory="Produce",le="+Inf"} 3
purgatory_time_in_purgatory_seconds_sum{outcome="early",purgatory="Produce"} 0.03
purgatory_time_in_purgatory_seconds_count{outcome="early",purgatory="Produce"} 3
purgatory_time_in_purgatory_seconds_bucket{outcome="expired",purgatory="Produce",le="0.001"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="expired",purgatory="Produce",le="0.01"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="expired",purgatory="Produce",le="0.016777216"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="expired",purgatory="Produce",le="0.05"} 1
purgatory_time_in_purgatory_seconds_bucket{outcome="expired",purgatory="Produce",le="+Inf"} 1
purgatory_time_in_purgatory_seconds_sum{outcome="expired",purgatory="Produce"} 0.016777
purgatory_time_in_purgatory_seconds_count{outcome="expired",purgatory="Produce"} 1
purgatory_time_in_purgatory_seconds_bucket{outcome="context",purgatory="Produce",le="0.001"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="context",purgatory="Produce",le="0.01"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="context",purgatory="Produce",le="0.016777216"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="context",purgatory="Produce",le="0.05"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="context",purgatory="Produce",le="+Inf"} 0
purgatory_time_in_purgatory_seconds_sum{outcome="context",purgatory="Produce"} 0
purgatory_time_in_purgatory_seconds_count{outcome="context",purgatory="Produce"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="for_key",purgatory="Produce",le="0.001"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="for_key",purgatory="Produce",le="0.01"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="for_key",purgatory="Produce",le="0.016777216"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="for_key",purgatory="Produce",le="0.05"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="for_key",purgatory="Produce",le="+Inf"} 0
purgatory_time_in_purgatory_seconds_sum{outcome="for_key",purgatory="Produce"} 0
purgatory_time_in_purgatory_seconds_count{outcome="for_key",purgatory="Produce"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="shutdown",purgatory="Produce",le="0.001"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="shutdown",purgatory="Produce",le="0.01"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="shutdown",purgatory="Produce",le="0.016777216"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="shutdown",purgatory="Produce",le="0.05"} 0
purgatory_time_in_purgatory_seconds_bucket{outcome="shutdown",purgatory="Produce",le="+Inf"} 0
purgatory_time_in_purgatory_seconds_sum{outcome="shutdown",purgatory="Produce"} 0
purgatory_time_in_purgatory_seconds_count{outcome="shutdown",purgatory="Produce"} 0
`
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "purgatory_time_in_purgatory_seconds"))
}

// With no bounds at all only the +Inf bucket is left: _count and _sum.
func TestWithNoBucketsKeepsCountAndSum(t *testing.T) {
	p, mt := newPurgatory(t, "Fetch")
	park(t, p, newOp(300*time.Millisecond), "k")
	mt.Advance(300 * time.Millisecond)

	c := purgatoryprom.NewCollector(purgatoryprom.WithBuckets())
	require.NoError(t, c.Add("Fetch", p, p.timed()))
	h := histograms(t, c)["Fetch/expired"]
	require.NotNil(t, h)
	assert.Empty(t, h.GetBucket())
	assert.EqualValues(t, 1, h.GetSampleCount())
	assert.Equal(t, 0.3, h.GetSampleSum())
}

// A purgatory added without WithTimes has its gauges and counters and no
// histogram series: nothing timed it. Beside it, a timed one has all five.
func TestWithoutTimesNoHistogram(t *testing.T) {
	p, mt := newPurgatory(t, "Fetch")
	park(t, p, newOp(300*time.Millisecond), "k")
	mt.Advance(300 * time.Millisecond)
	q, _ := newPurgatory(t, "Produce")

	c := purgatoryprom.NewCollector()
	require.NoError(t, c.Add("Fetch", p.Purgatory))
	require.NoError(t, c.Add("Produce", q, q.timed()))
	h := histograms(t, c)
	assert.Len(t, h, 5, "Produce's five outcomes only")
	assert.Nil(t, h["Fetch/expired"])
	assert.NotNil(t, h["Produce/expired"])
	assert.Equal(t, 2, testutil.CollectAndCount(c, "purgatory_expires_total"))
}

// Bounds that are not positive and strictly increasing are a programming
// error, caught when the collector is made.
func TestWithBucketsRejectsBadBounds(t *testing.T) {
	const msg = "purgatoryprom: bucket bounds must be positive and strictly increasing"
	for name, bounds := range map[string][]time.Duration{
		"zero":       {0, time.Second},
		"negative":   {-time.Second},
		"decreasing": {time.Second, time.Millisecond},
		"repeated":   {time.Second, time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			assert.PanicsWithValue(t, msg, func() { purgatoryprom.NewCollector(purgatoryprom.WithBuckets(bounds...)) })
		})
	}
}

// promlint finds nothing to complain about in the names, types, units and
// help of a scrape with every metric present.
func TestCollectAndLint(t *testing.T) {
	produce, fetch, _ := exercise(t)
	c := purgatoryprom.NewCollector()
	require.NoError(t, c.Add("Produce", produce, produce.timed()))
	require.NoError(t, c.Add("Fetch", fetch, fetch.timed()))
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
	assert.Equal(t, 2*(2+9+5), testutil.CollectAndCount(c), "2 gauges, 9 counters, 5 histograms per purgatory")
}

// Add refuses what would make a scrape fail or be ambiguous, and changes
// nothing when it does.
func TestAddRefusesBadNamesAndSources(t *testing.T) {
	p, _ := newPurgatory(t, "Produce")
	c := purgatoryprom.NewCollector()
	require.NoError(t, c.Add("Produce", p, p.timed()))

	assert.ErrorIs(t, c.Add("Produce", p), purgatoryprom.ErrDuplicateName)
	assert.ErrorIs(t, c.Add("", p), purgatoryprom.ErrInvalidName)
	assert.ErrorIs(t, c.Add("bad\xff", p), purgatoryprom.ErrInvalidName)
	assert.ErrorIs(t, c.Add("Fetch", nil), purgatoryprom.ErrNilSource)
	assert.Equal(t, 1, testutil.CollectAndCount(c, "purgatory_size"))
}

// Purgatories come and go after the collector is registered: a scrape
// reports those added at that moment.
func TestAddAndRemoveAfterRegistration(t *testing.T) {
	produce, _ := newPurgatory(t, "Produce")
	fetch, _ := newPurgatory(t, "Fetch")
	c := purgatoryprom.NewCollector()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))

	count := func() int {
		n, err := testutil.GatherAndCount(reg, "purgatory_delayed_operations")
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, 0, count(), "nothing added yet")
	require.NoError(t, c.Add("Produce", produce, produce.timed()))
	require.NoError(t, c.Add("Fetch", fetch, fetch.timed()))
	assert.Equal(t, 2, count())

	assert.True(t, c.Remove("Produce"))
	assert.False(t, c.Remove("Produce"), "already removed")
	assert.Equal(t, 1, count())
	require.NoError(t, c.Add("Produce", produce), "a removed name may be added again")
	assert.Equal(t, 2, count())
}

// The descriptors do not depend on the purgatories, so a second collector
// in the same registry is a duplicate: one collector serves them all.
func TestOneCollectorPerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(purgatoryprom.NewCollector()))
	var dup prometheus.AlreadyRegisteredError
	assert.ErrorAs(t, reg.Register(purgatoryprom.NewCollector()), &dup)
}

// A Collector must come from NewCollector, and says so.
func TestZeroCollectorPanics(t *testing.T) {
	var c purgatoryprom.Collector
	const msg = "purgatoryprom: Collector not created with NewCollector"
	assert.PanicsWithValue(t, msg, func() { _ = c.Add("Produce", &c0{}) })
	assert.PanicsWithValue(t, msg, func() { c.Remove("Produce") })
}

// c0 is a Source that reports nothing.
type c0 struct{}

func (c0) Stats() purgatory.Stats { return purgatory.Stats{} }

// Past 292 years of accumulated time in purgatory (11 days for a busy
// broker) a Duration cannot hold the sum; _sum, from SumSeconds, stays
// right. Four operations parked for 2^61ns each (the longest timeout an
// operation keeps, 73 years) add up to 2^63ns, one more than a Duration
// holds. (The test parked three for 2^62ns, which Init takes as 2^61ns,
// and relied on a MockTimer's Advance expiring them at its end; it now
// expires each at its deadline.)
func TestSumSurvivesInt64Overflow(t *testing.T) {
	p, mt := newPurgatory(t, "Fetch")
	for _, k := range []string{"a", "b", "c", "d"} {
		park(t, p, newOp(1<<61), k)
	}
	mt.Advance(1 << 62)
	require.Equal(t, uint64(4), p.Stats().Expired)
	h := p.times.Snapshot().Expired
	require.Equal(t, time.Duration(math.MaxInt64), h.Sum(), "a Duration saturates")

	c := purgatoryprom.NewCollector()
	require.NoError(t, c.Add("Fetch", p, p.timed()))
	got := histograms(t, c)["Fetch/expired"]
	require.NotNil(t, got)
	assert.EqualValues(t, 4, got.GetSampleCount())
	assert.InEpsilon(t, 4*float64(1<<61)/1e9, got.GetSampleSum(), 1e-9, "SumSeconds does not")
}
