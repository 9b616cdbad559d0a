package lifecycle

import (
	"context"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a park writes and what a completion writes are on different cache
// lines (of 64 bytes, and of the 128 that adjacent-line prefetch pairs), and
// stripes do not share lines either.
func TestTrackerStripeLayout(t *testing.T) {
	var s trackerStripe
	parkEnd := unsafe.Offsetof(s.arrived) + unsafe.Sizeof(s.arrived)
	assert.GreaterOrEqual(t, unsafe.Offsetof(s.left), uintptr(128), "completion counters start a 128-byte block")
	assert.LessOrEqual(t, parkEnd, uintptr(64), "park counters fit one line")
	assert.LessOrEqual(t, unsafe.Offsetof(s.panics)+unsafe.Sizeof(s.panics)-unsafe.Offsetof(s.left), uintptr(64))
	assert.Zero(t, unsafe.Sizeof(s)%128)
}

// A meta of an operation's own, what an observed or fat operation costs
// beside its Op, stays within the 96-byte size class; an Op, with its
// timer entry, is 64 bytes, the class of an operation with no fields of
// its own.
func TestMetaAndOpSizes(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(meta{}), uintptr(96))
	assert.Equal(t, uintptr(64), unsafe.Sizeof(Op{}))
}

// Live, read while operations are parked, watched and completed on other
// goroutines, never reports fewer than zero of either, and ends at zero.
func TestLiveNeverNegative(t *testing.T) {
	var tr Tracker
	const workers, each = 2, 5000
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Add(1)
	var minPending, minWatched int64
	go func() {
		defer reader.Done()
		for {
			p, w := tr.Live()
			minPending, minWatched = min(minPending, p), min(minWatched, w)
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	ops := make(chan *seamOp, 256)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range each {
				o := newSeamOp(context.Background())
				parkCounted(&o.Op, &tr, 0, 3, false)
				ops <- o
			}
		}()
		go func() {
			defer wg.Done()
			for range each {
				ForceComplete(&(<-ops).Op)
			}
		}()
	}
	wg.Wait()
	close(stop)
	reader.Wait()
	assert.Zero(t, minPending)
	assert.Zero(t, minWatched)
	p, w := tr.Live()
	require.Zero(t, p)
	require.Zero(t, w)
	assert.Equal(t, uint64(workers*each), tr.Counts().Done[Early])
}

// An operation parked, watched and completed exactly between Live's two
// passes is counted as an arrival and not as a departure: Live then reports
// one too many for that moment, never one too few (below zero).
func TestLiveWithAnOperationBetweenItsPasses(t *testing.T) {
	var tr Tracker
	once := false
	tr.Hooks = &Hooks{Live: func() {
		if once {
			return
		}
		once = true
		o := newSeamOp(context.Background())
		_, ok := parkCounted(&o.Op, &tr, 0, 2, false)
		require.True(t, ok)
		require.True(t, ForceComplete(&o.Op))
	}}
	p, w := tr.Live()
	assert.Equal(t, int64(1), p, "counted as arrived only")
	assert.Equal(t, int64(2), w)
	p, w = tr.Live()
	assert.Zero(t, p)
	assert.Zero(t, w)
}

// The packed sums wrap; Live's difference of them stays exact.
func TestLiveAcrossWrappedSums(t *testing.T) {
	var tr Tracker
	s := &tr.stripes[3]
	s.left.Store(^uint64(0) - counts(2) + 1) // as if 2^64 - that had left
	s.arrived.Store(s.left.Load() + counts(3) + counts(4))
	tr.stripes[9].arrived.Store(counts(1))
	p, w := tr.Live()
	assert.Equal(t, int64(3), p)
	assert.Equal(t, int64(8), w)
}

// parkCounted parks o and, if that succeeds, counts it as pending, as a
// purgatory's park does once the timeout is in its timer.
func parkCounted(o *Op, t *Tracker, now int64, watches int, deferred bool) (*Handle, bool) {
	if r := Park(o, t, now, watches, deferred); r != Accepted {
		return nil, false
	}
	h, _ := AddTimeout(o, t.Core, nil)
	Arrived(o, t, watches)
	return h, true
}

// MaxPending is a hard bound on reservations: a place given back (release)
// can be taken again.
func TestReserve(t *testing.T) {
	tr := Tracker{MaxPending: 2}
	assert.True(t, tr.Reserve())
	assert.True(t, tr.Reserve())
	assert.False(t, tr.Reserve())
	tr.release()
	assert.True(t, tr.Reserve())
}
