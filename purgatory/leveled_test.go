package purgatory_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// hwm is a partition's high watermark, which only rises.
type hwm struct{ v atomic.Int64 }

// produceOp waits for the high watermark of its key to reach required; it
// counts its TryComplete calls.
type produceOp struct {
	operation.Base
	required int64
	hw       *hwm
	tries    *atomic.Int64
}

func (o *produceOp) WatchLevel(string) int64 { return o.required }

func (o *produceOp) TryComplete() bool {
	o.tries.Add(1)
	if o.hw.v.Load() >= o.required {
		return o.ForceComplete()
	}
	return false
}
func (*produceOp) OnComplete()   {}
func (*produceOp) OnExpiration() {}

func newProduceOp(required int64, hw *hwm, tries *atomic.Int64) *produceOp {
	o := &produceOp{required: required, hw: hw, tries: tries}
	o.Init(o, time.Hour)
	return o
}

// CheckAndCompleteUpTo tries only what is due; CheckAndComplete tries
// everything, levelled or not.
func TestCheckAndCompleteUpTo(t *testing.T) {
	p, err := purgatory.New[string, *produceOp]("levels", purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	var hw hwm
	var tries atomic.Int64
	ops := make([]*produceOp, 10)
	for i := range ops {
		ops[i] = newProduceOp(int64(10*(i+1)), &hw, &tries)
		done, err := p.TryCompleteElseWatch(ops[i], "p0")
		require.NoError(t, err)
		require.False(t, done)
	}
	tries.Store(0)
	hw.v.Store(35)
	assert.Equal(t, 3, p.CheckAndCompleteUpTo("p0", 35))
	assert.Equal(t, int64(3), tries.Load(), "only the due operations are tried")
	assert.Equal(t, 7, p.NumDelayed())
	assert.Equal(t, 0, p.CheckAndCompleteUpTo("p0", 35))
	assert.Equal(t, int64(3), tries.Load(), "nothing due: nothing tried")

	hw.v.Store(55)
	tries.Store(0)
	assert.Equal(t, 2, p.CheckAndComplete("p0"))
	assert.Equal(t, int64(7), tries.Load(), "CheckAndComplete tries every operation")
	hw.v.Store(1000)
	assert.Equal(t, 5, p.CheckAndCompleteUpTo("p0", 1000))
	assert.Equal(t, 0, p.NumDelayed())
	assert.Equal(t, 0, p.Watched())
}

// A Purgatory whose T is an interface asks each operation whether it is
// levelled.
func TestLevelsWithInterfaceT(t *testing.T) {
	p, err := purgatory.New[string, operation.DelayedOperation]("any", purgatory.WithoutTimer(), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	var hw hwm
	var tries atomic.Int64
	lv := newProduceOp(10, &hw, &tries)
	plain := newOp(time.Hour)
	_, err = p.TryCompleteElseWatch(lv, "k")
	require.NoError(t, err)
	_, err = p.TryCompleteElseWatch(plain, "k")
	require.NoError(t, err)
	hw.v.Store(10)
	plain.Ready.Store(true)
	assert.Equal(t, 1, p.CheckAndCompleteUpTo("k", 10), "the levelled one only")
	assert.True(t, lv.IsCompleted())
	assert.False(t, plain.IsCompleted())
	assert.Equal(t, 1, p.CheckAndComplete("k"))
}

// panicLevel panics in WatchLevel.
type panicLevel struct{ produceOp }

func (*panicLevel) WatchLevel(string) int64 { panic("bad level") }

// A WatchLevel that panics leaves nothing parked or counted.
func TestWatchLevelPanicParksNothing(t *testing.T) {
	p, err := purgatory.New[string, *panicLevel]("panic", purgatory.WithoutTimer(), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	var tries atomic.Int64
	o := &panicLevel{produceOp{required: 1, hw: &hwm{}, tries: &tries}}
	o.Init(o, time.Hour)
	assert.PanicsWithValue(t, "bad level", func() { _, _ = p.TryCompleteElseWatch(o, "k") })
	assert.Equal(t, 0, p.NumDelayed())
	assert.Equal(t, 0, p.Watched())
	assert.False(t, o.IsCompleted())
}

// The hot key of the performance issue: 50,000 operations parked on one
// key, completed in 1,000 rising batches. With levels each completion
// costs one TryComplete; plain checks cost 500 a completion on average.
// (The plain side runs at a tenth of the size here: under the race
// detector its 25 million calls take most of a minute. BenchmarkHotKey
// compares both at full size.)
func TestHotKeyLevels(t *testing.T) {
	const n, batches = 50_000, 1_000
	levelled := hotKey(t, n, batches, true)
	plain := hotKey(t, n/10, batches/10, false)
	t.Logf("TryComplete calls per completion: levels %.2f (of %d), plain %.0f (of %d)",
		float64(levelled)/n, n, float64(plain)/(n/10), n/10)
	assert.LessOrEqual(t, levelled, int64(2*n), "at most 2 TryComplete calls per completion")
	assert.Greater(t, plain, int64(10*n/10), "plain checks try everything on the key")
}

// hotKey parks n operations on one key at rising levels and completes
// them in batches, returning the TryComplete calls made after parking.
func hotKey(t testing.TB, n, batches int, levels bool) int64 {
	p, err := purgatory.New[string, *produceOp]("hot", purgatory.WithoutTimer(), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	var hw hwm
	var tries atomic.Int64
	for i := range n {
		if _, err := p.TryCompleteElseWatch(newProduceOp(int64(i+1), &hw, &tries), "hot"); err != nil {
			t.Fatal(err)
		}
	}
	tries.Store(0)
	per := n / batches
	for b := 1; b <= batches; b++ {
		hw.v.Store(int64(b * per))
		var got int
		if levels {
			got = p.CheckAndCompleteUpTo("hot", int64(b*per))
		} else {
			got = p.CheckAndComplete("hot")
		}
		if got != per {
			t.Fatalf("batch %d completed %d, want %d", b, got, per)
		}
	}
	if p.NumDelayed() != 0 {
		t.Fatalf("%d left", p.NumDelayed())
	}
	return tries.Load()
}

// BenchmarkHotKey is the hot key above, per completion, with levels and
// with plain checks, in the same run.
func BenchmarkHotKey(b *testing.B) {
	const n, batches = 50_000, 1_000
	for _, levels := range []bool{true, false} {
		name := "plain"
		if levels {
			name = "levels"
		}
		b.Run(name, func(b *testing.B) {
			var tries int64
			for b.Loop() {
				tries += hotKey(b, n, batches, levels)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int64(b.N)*n), "ns/completion")
			b.ReportMetric(float64(tries)/float64(int64(b.N)*n), "tries/completion")
		})
	}
}
