package timing_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// mockOp completes when Ready is set and it is checked, and counts its
// expiries (Kafka's MockDelayedOperation).
type mockOp struct {
	operation.Base
	Ready    atomic.Bool
	Expiries atomic.Int32
}

func (o *mockOp) TryComplete() bool {
	if o.Ready.Load() {
		return o.ForceComplete()
	}
	return false
}

func (o *mockOp) OnComplete()   {}
func (o *mockOp) OnExpiration() { o.Expiries.Add(1) }

type pg = purgatory.Purgatory[string, *mockOp]

func newOp(timeout time.Duration, opts ...operation.InitOption) *mockOp {
	o := &mockOp{}
	o.Init(o, timeout, opts...)
	return o
}

// newMockPurgatory returns a purgatory on a MockTimer with no reaper,
// timed by a Recorder, and shut down when the test ends.
func newMockPurgatory(t *testing.T, opts ...purgatory.Option) (*pg, *timer.MockTimer, *timing.Recorder) {
	t.Helper()
	mt := timer.NewMockTimer()
	rec := new(timing.Recorder)
	p, err := purgatory.New[string, *mockOp]("mock", append([]purgatory.Option{purgatory.WithTimer(mt),
		purgatory.WithoutReaper(), purgatory.WithObserver(rec)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Shutdown(context.Background())) })
	return p, mt, rec
}

func mustPark(t *testing.T, p *pg, op *mockOp, keys ...string) {
	t.Helper()
	done, err := p.TryCompleteElseWatch(op, keys...)
	require.NoError(t, err)
	require.False(t, done)
}

// The time in purgatory of operations on a MockTimer is exact: parked at
// known times, completed at known times, each way counted apart.
func TestTimeInPurgatory(t *testing.T) {
	p, mt, rec := newMockPurgatory(t)
	early := newOp(time.Second)
	expired := newOp(200 * time.Millisecond)
	mustPark(t, p, early, "a")
	mustPark(t, p, expired, "b")
	mt.Advance(30 * time.Millisecond)
	early.Ready.Store(true)
	require.Equal(t, 1, p.CheckAndComplete("a"))
	mt.Advance(170 * time.Millisecond)
	require.Equal(t, int32(1), expired.Expiries.Load())
	left := newOp(time.Hour)
	mustPark(t, p, left, "c")
	mt.Advance(5 * time.Second)
	require.NoError(t, p.Shutdown(context.Background()))

	tip := rec.Snapshot()
	assert.Equal(t, uint64(1), tip.CompletedEarly.Count())
	assert.Equal(t, 30*time.Millisecond, tip.CompletedEarly.Sum())
	assertInBucketOf(t, 30*time.Millisecond, tip.CompletedEarly.Quantile(0.5))
	assert.Equal(t, 200*time.Millisecond, tip.Expired.Sum())
	assertInBucketOf(t, 200*time.Millisecond, tip.Expired.Quantile(0.99))
	assert.Equal(t, 5*time.Second, tip.Shutdown.Sum())
	assert.Equal(t, uint64(0), tip.ContextDone.Count())
	all := tip.Merged()
	assert.Equal(t, uint64(3), all.Count())
	assert.Equal(t, 5230*time.Millisecond, all.Sum())
	assert.Equal(t, 5.23, all.SumSeconds())
	var names []string
	for name, h := range tip.All() {
		names = append(names, fmt.Sprintf("%s=%d", name, h.Count()))
	}
	assert.Equal(t, []string{"early=1", "expired=1", "context=0", "shutdown=1", "for_key=0"}, names)
}

// assertInBucketOf checks that got is within a bucket's width (12.5%) of
// want: the histogram's promise.
func assertInBucketOf(t *testing.T, want, got time.Duration) {
	t.Helper()
	assert.InEpsilon(t, float64(want), float64(got), 0.125, "want about %v, got %v", want, got)
}

// Quantiles against the sorted durations, for several distributions, and
// Merge against recording everything in one histogram.
func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	dists := map[string]func() time.Duration{
		"uniform-ms":  func() time.Duration { return time.Duration(r.Int64N(int64(time.Second))) },
		"exp-us":      func() time.Duration { return time.Duration(r.ExpFloat64() * 50e3) },
		"log-uniform": func() time.Duration { return time.Duration(1 << (10 + r.IntN(30))) },
	}
	for name, gen := range dists {
		t.Run(name, func(t *testing.T) {
			// Record through a purgatory on a mock clock: park at 0,
			// complete each at its duration.
			p, mt, rec := newMockPurgatory(t)
			ds := make([]time.Duration, 2000)
			for i := range ds {
				ds[i] = gen().Round(time.Microsecond) + time.Microsecond
			}
			slices.Sort(ds)
			ops := make([]*mockOp, len(ds))
			for i := range ops {
				ops[i] = newOp(time.Hour)
				mustPark(t, p, ops[i], "k")
			}
			var at time.Duration
			for i, d := range ds {
				mt.Advance(d - at)
				at = d
				ops[i].ForceComplete()
			}
			h := rec.Snapshot().CompletedEarly
			require.Equal(t, uint64(len(ds)), h.Count())
			assert.Equal(t, ds[0], h.Min())
			assert.Equal(t, ds[len(ds)-1], h.Max())
			for _, q := range []float64{0.01, 0.1, 0.5, 0.9, 0.99, 1} {
				want := ds[max(int(q*float64(len(ds)))-1, 0)]
				got := h.Quantile(q)
				assert.InEpsilon(t, float64(want), float64(got), 0.125, "q=%v: want %v, got %v", q, want, got)
			}
			var halves timing.Histogram
			half := rec.Snapshot().CompletedEarly
			halves.Merge(&half)
			halves.Merge(&half)
			assert.Equal(t, 2*h.Count(), halves.Count())
			assert.Equal(t, 2*h.Sum(), halves.Sum())
			assert.InEpsilon(t, float64(h.Quantile(0.5)), float64(halves.Quantile(0.5)), 0.05)
		})
	}
	var empty timing.Histogram
	assert.Equal(t, time.Duration(0), empty.Quantile(0.5))
	assert.Equal(t, "n=0", empty.String())
}

// Recording allocates nothing beyond what any observer costs: an
// operation parked and completed in a purgatory with a Recorder costs the
// operation and the record an observed operation has of its own, one
// allocation more than without an observer.
func TestRecorderAllocatesNothing(t *testing.T) {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *mockOp]("allocs", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	q, err := purgatory.New[string, *mockOp]("allocs", purgatory.WithTimer(timer.NewMockTimer()),
		purgatory.WithoutReaper(), purgatory.WithObserver(new(timing.Recorder)))
	require.NoError(t, err)
	defer q.Shutdown(context.Background())
	park := func(p *pg) func() {
		return func() {
			o := newOp(time.Second)
			_, _ = p.TryCompleteElseWatch(o, "k")
			o.Ready.Store(true)
			p.CheckAndComplete("k")
		}
	}
	bare := testing.AllocsPerRun(1000, park(p))
	assert.Equal(t, bare+1, testing.AllocsPerRun(1000, park(q)))
	// The operation: nothing else on the request path.
	assert.LessOrEqual(t, bare, 1.0)
}

// An operation with its own lock costs no more allocations than a plain
// one in an observed purgatory: the record Init makes for the lock stands
// in for the one the park makes for the observer, and the park keeps it
// rather than making another.
func TestFatOperationParksWithoutAnotherHandle(t *testing.T) {
	p, _, _ := newMockPurgatory(t)
	var mu sync.Mutex
	request := func(opts ...operation.InitOption) func() {
		return func() {
			o := newOp(time.Second, opts...)
			_, _ = p.TryCompleteElseWatch(o, "k")
			o.Ready.Store(true)
			p.CheckAndComplete("k")
		}
	}
	plain := testing.AllocsPerRun(1000, request())
	fat := testing.AllocsPerRun(1000, request(operation.WithLock(&mu)))
	assert.Equal(t, plain, fat)
}

// Cancelled operations are not timed, and a Recorder on two purgatories
// adds up both.
func TestRecorderSkipsCancelsAndSumsPurgatories(t *testing.T) {
	p, mt, rec := newMockPurgatory(t)
	q, err := purgatory.New[string, *mockOp]("other", purgatory.WithTimer(mt), purgatory.WithoutReaper(),
		purgatory.WithObserver(rec))
	require.NoError(t, err)
	defer q.Shutdown(context.Background())
	a, b, c := newOp(time.Second), newOp(time.Second), newOp(time.Second)
	mustPark(t, p, a, "k")
	mustPark(t, q, b, "k")
	mustPark(t, q, c, "gone")
	mt.Advance(10 * time.Millisecond)
	require.Len(t, q.CancelForKey("gone"), 1)
	a.ForceComplete()
	b.ForceComplete()
	tip := rec.Snapshot()
	assert.Equal(t, uint64(2), tip.CompletedEarly.Count())
	assert.Equal(t, 20*time.Millisecond, tip.CompletedEarly.Sum())
	all := tip.Merged()
	assert.Equal(t, uint64(2), all.Count(), "the cancel is not timed")
}

// An operation with a context or a lock keeps its park time in its fat
// handle: it is timed like any other.
func TestTimeInPurgatoryOfFatOperations(t *testing.T) {
	p, mt, rec := newMockPurgatory(t)
	var l operation.SharedLock
	a := newOp(time.Hour, operation.WithContext(context.Background()), operation.WithLock(&l))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := newOp(time.Hour, operation.WithContext(ctx))
	mustPark(t, p, a, "a")
	mt.Advance(10 * time.Millisecond)
	mustPark(t, p, b, "b")
	mt.Advance(20 * time.Millisecond)
	a.ForceComplete()
	b.ForceComplete()
	tip := rec.Snapshot()
	assert.Equal(t, uint64(2), tip.CompletedEarly.Count())
	assert.Equal(t, 50*time.Millisecond, tip.CompletedEarly.Sum(), "30ms and 20ms")
	assert.Equal(t, 20*time.Millisecond, tip.CompletedEarly.Min())
	assert.Equal(t, 30*time.Millisecond, tip.CompletedEarly.Max())
}
