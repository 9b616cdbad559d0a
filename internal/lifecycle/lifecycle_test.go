package lifecycle_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/operation"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A second Init, before any park, replaces the first's options: without
// WithLock the operation is back on its own lock.
func TestInitAgainDropsOptions(t *testing.T) {
	var mu sync.Mutex
	o := optest.New(0, operation.WithLock(&mu))
	lo := lifecycle.Of(o)
	assert.Same(t, &mu, lifecycle.Lock(lo))
	o.Init(o, 0)
	assert.NotSame(t, &mu, lifecycle.Lock(lo))
	l := lifecycle.Lock(lo)
	l.Lock()
	assert.True(t, mu.TryLock(), "the mutex given first is no longer the operation's")
	mu.Unlock()
	l.Unlock()
	// Parked, it gets a plain Handle, which must not be read as the
	// options' (fat) one.
	var tr lifecycle.Tracker
	h, ok := parkCounted(lo, &tr, 0, 1, false)
	assert.True(t, ok)
	assert.Equal(t, l, lifecycle.Lock(lo))
	assert.True(t, o.ForceComplete())
	assert.Nil(t, lifecycle.OpOf(h))
}

// The operation's own lock excludes, blocks and wakes like a mutex.
func TestOwnLockExcludes(t *testing.T) {
	o := optest.New(0)
	l := lifecycle.Lock(lifecycle.Of(o))
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				l.Lock()
				n := inside.Add(1)
				if n > maxInside.Load() {
					maxInside.Store(n)
				}
				inside.Add(-1)
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), maxInside.Load())
	tl := l.(interface{ TryLock() bool })
	assert.True(t, tl.TryLock())
	assert.False(t, tl.TryLock())
	l.Unlock()
	assert.True(t, tl.TryLock(), "Unlock let go")
	l.Unlock()
	assert.Panics(t, func() { l.Unlock() })
}

// Park refuses an operation that is parked, completed or cancelled, and a
// ForceComplete of a parked operation uncounts it exactly once.
func TestParkCountsOnce(t *testing.T) {
	var tr lifecycle.Tracker
	o := optest.New(0)
	lo := lifecycle.Of(o)
	h, ok := parkCounted(lo, &tr, 0, 3, false)
	assert.True(t, ok)
	assert.Same(t, lo, lifecycle.OpOf(h))
	_, ok = parkCounted(lo, &tr, 0, 5, false)
	assert.False(t, ok, "parked twice")
	c := tr.Counts()
	assert.Equal(t, int64(1), c.Pending)
	assert.Equal(t, int64(3), c.Watched)
	assert.True(t, o.ForceComplete())
	assert.False(t, o.ForceComplete())
	assert.Nil(t, lifecycle.OpOf(h), "completion clears the handle")
	c = tr.Counts()
	assert.Equal(t, int64(0), c.Pending)
	assert.Equal(t, int64(0), c.Watched)
	assert.Equal(t, uint64(1), c.Done[lifecycle.Early])
	_, ok = parkCounted(lo, &tr, 0, 0, false)
	assert.False(t, ok, "a completed operation parked again")
	assert.Equal(t, int64(0), tr.Counts().Pending)
}

// Cancel takes a parked operation out uncompleted, once; it cannot be
// parked again, and a ForceComplete afterwards runs OnComplete uncounted.
func TestCancel(t *testing.T) {
	var tr lifecycle.Tracker
	o := optest.New(0)
	lo := lifecycle.Of(o)
	h, _ := parkCounted(lo, &tr, 0, 2, false)
	assert.True(t, lifecycle.Cancel(lo))
	assert.False(t, lifecycle.Cancel(lo))
	assert.Nil(t, lifecycle.OpOf(h))
	assert.False(t, o.IsCompleted())
	_, ok := parkCounted(lo, &tr, 0, 0, false)
	assert.False(t, ok)
	o.Ready.Store(true)
	assert.False(t, lifecycle.TryComplete(lo), "checks leave a cancelled operation alone")
	assert.True(t, o.ForceComplete())
	assert.Equal(t, int32(1), o.Completes.Load())
	c := tr.Counts()
	assert.Equal(t, lifecycle.Counts{Cancelled: 1}, c)
}

// Expiry, context and shutdown act only for a purgatory that still holds
// the operation.
func TestExpireNeedsParked(t *testing.T) {
	o := optest.New(0)
	lo := lifecycle.Of(o)
	assert.False(t, lifecycle.Expire(lo, lifecycle.Expired), "never parked")
	assert.Equal(t, int32(0), o.Completes.Load())
	var tr lifecycle.Tracker
	parkCounted(lo, &tr, 0, 0, false)
	assert.True(t, lifecycle.Expire(lo, lifecycle.Expired))
	assert.Equal(t, int32(1), o.Expiries.Load())
	assert.True(t, o.IsExpired())
	k, ok := lifecycle.KindOf(lo)
	assert.True(t, ok)
	assert.Equal(t, lifecycle.Expired, k)
}

// parkCounted parks o and, if that succeeds, counts it as pending, as a
// purgatory's park does once the timeout is in its timer.
func parkCounted(o *lifecycle.Op, t *lifecycle.Tracker, now int64, watches int, deferred bool) (*lifecycle.Handle, bool) {
	if r := lifecycle.Park(o, t, now, watches, deferred); r != lifecycle.Accepted {
		return nil, false
	}
	h, _ := lifecycle.AddTimeout(o, t.Core, nil)
	lifecycle.Arrived(o, t, watches)
	return h, true
}
