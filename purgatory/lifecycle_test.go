package purgatory_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Regression (defect 1 of the lifecycle issue): a ForceComplete from user
// code racing with the park of the same operation. One goroutine parks
// operations one after another; another force-completes whichever is being
// parked. Every OnComplete runs once, and the counts add up exactly.
func TestParkRacingForceComplete(t *testing.T) {
	n := 50_000
	if *full {
		n = 200_000
	}
	p, err := purgatory.New[string, *mockOp]("race", purgatory.WithoutTimer(), purgatory.WithoutReaper())
	require.NoError(t, err)
	var current atomic.Pointer[mockOp]
	stop := make(chan struct{})
	var forced atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Once per operation, after a random delay, so that the force lands
		// before, inside and after the park in turn.
		r := rand.New(rand.NewPCG(3, 3))
		var last *mockOp
		var spin atomic.Int64
		for {
			select {
			case <-stop:
				return
			default:
			}
			o := current.Load()
			if o == nil || o == last {
				continue
			}
			last = o
			for range r.IntN(400) {
				spin.Add(1)
			}
			if o.ForceComplete() {
				forced.Add(1)
			}
		}
	}()
	ops := make([]*mockOp, n)
	accepted := 0
	for i := range ops {
		o := newOp(time.Hour)
		ops[i] = o
		current.Store(o)
		if _, err := p.TryCompleteElseWatch(o, "k"+strconv.Itoa(i%64)); err == nil {
			accepted++
		} else {
			require.ErrorIs(t, err, purgatory.ErrAlreadyWatched, "only an operation completed before its park is refused")
		}
	}
	close(stop)
	wg.Wait()
	require.NoError(t, p.Shutdown(context.Background()))
	for i, o := range ops {
		if o.Completes.Load() != 1 {
			t.Fatalf("op %d: OnComplete ran %d times", i, o.Completes.Load())
		}
	}
	st := p.Stats()
	assert.Equal(t, 0, st.Pending)
	assert.Equal(t, 0, st.Watched)
	assert.Equal(t, uint64(accepted), st.CompletedEarly+st.Shutdown, "every parked operation counted once")
	assert.LessOrEqual(t, st.CompletedEarly, uint64(forced.Load()))
	t.Logf("%d parked, %d force-completed (%d before their park)", accepted, forced.Load(), n-accepted)
}

// blockingOp's TryComplete, once armed, signals that it has started and
// waits to be released before completing.
type blockingOp struct {
	mockOp
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (o *blockingOp) TryComplete() bool {
	if o.armed.CompareAndSwap(true, false) {
		close(o.entered)
		<-o.release
		return o.ForceComplete()
	}
	return false
}

// CancelForKey while a check is inside the operation's TryComplete: the
// cancel waits for the check, which completes the operation, so the
// operation is not also handed back as cancelled.
func TestCancelWaitsForRunningCheck(t *testing.T) {
	p, err := purgatory.New[string, *blockingOp]("cancel", purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	o := &blockingOp{entered: make(chan struct{}), release: make(chan struct{})}
	o.Init(o, time.Hour)
	_, err = p.TryCompleteElseWatch(o, "a", "b")
	require.NoError(t, err)

	o.armed.Store(true)
	checked := make(chan int)
	go func() { checked <- p.CheckAndComplete("b") }()
	<-o.entered // the check holds the operation's lock, inside TryComplete

	var cancelled []*blockingOp
	cancelDone := make(chan struct{})
	go func() { defer close(cancelDone); cancelled = p.CancelForKey("a") }()
	select {
	case <-cancelDone:
		t.Fatal("CancelForKey did not wait for the running check")
	case <-time.After(50 * time.Millisecond):
		// Still waiting, as it should; this branch only bounds the wait.
	}
	close(o.release)
	assert.Equal(t, 1, <-checked)
	<-cancelDone
	assert.Empty(t, cancelled, "completed by the check, not cancelled")
	assert.Equal(t, int32(1), o.Completes.Load())
	st := p.Stats()
	assert.Equal(t, uint64(1), st.CompletedEarly)
	assert.Equal(t, uint64(0), st.Cancelled)
	assert.Equal(t, 0, st.Pending)
}

// runOp has a Run method of its own, a common name; it must not stand in
// for the timer's expiry (defect 5).
type runOp struct {
	mockOp
	runs atomic.Int32
}

func (o *runOp) Run() { o.runs.Add(1) }

func TestOwnRunMethodDoesNotDisableExpiry(t *testing.T) {
	t.Run("MockTimer", func(t *testing.T) {
		mt := timer.NewMockTimer()
		p, err := purgatory.New[string, *runOp]("run", purgatory.WithTimer(mt), purgatory.WithoutReaper())
		require.NoError(t, err)
		defer p.Shutdown(context.Background())
		o := &runOp{}
		o.Init(o, 50*time.Millisecond)
		_, err = p.TryCompleteElseWatch(o, "k")
		require.NoError(t, err)
		mt.Advance(49 * time.Millisecond)
		assert.Equal(t, int32(0), o.Completes.Load(), "expired early")
		mt.Advance(time.Millisecond)
		assert.Equal(t, int32(1), o.Expiries.Load(), "expired on time")
		assert.Equal(t, int32(0), o.runs.Load(), "the user's Run is not the timer's")
	})
	t.Run("SystemTimer", func(t *testing.T) {
		p, err := purgatory.New[string, *runOp]("run")
		require.NoError(t, err)
		defer p.Shutdown(context.Background())
		o := &runOp{}
		o.Init(o, 5*time.Millisecond)
		start := time.Now()
		_, err = p.TryCompleteElseWatch(o, "k")
		require.NoError(t, err)
		waitFor(t, func() bool { return o.Expiries.Load() == 1 })
		assert.GreaterOrEqual(t, time.Since(start), 5*time.Millisecond)
		assert.Equal(t, int32(0), o.runs.Load())
		assert.Equal(t, uint64(1), p.Stats().Expired)
	})
}

// WithMaxPending refuses what would go past the bound, without trying or
// parking it, and takes again once an operation has left.
func TestWithMaxPending(t *testing.T) {
	p, _ := newMockPurgatory(t, purgatory.WithMaxPending(2))
	a, b, c := newOp(time.Hour), newOp(time.Hour), newOp(time.Hour)
	mustPark(t, p, a, "k")
	mustPark(t, p, b, "k")
	c.Ready.Store(true)
	done, err := p.TryCompleteElseWatch(c, "k")
	assert.ErrorIs(t, err, purgatory.ErrFull)
	assert.False(t, done)
	assert.Equal(t, int32(0), c.Completes.Load(), "a refused operation is not tried")
	assert.Equal(t, 2, p.NumDelayed())
	assert.Equal(t, uint64(1), p.Stats().Full)

	a.ForceComplete()
	mustPark(t, p, newOp(time.Hour), "k")
	assert.Equal(t, 2, p.NumDelayed())
	// A place is given back by every way out: cancel, and completion
	// within TryCompleteElseWatch.
	p.CancelForKey("k")
	assert.Equal(t, 0, p.NumDelayed())
	for range 4 {
		ready := newOp(time.Hour)
		ready.Ready.Store(true)
		done, err := p.TryCompleteElseWatch(ready, "k")
		require.NoError(t, err)
		require.True(t, done)
	}
	mustPark(t, p, newOp(time.Hour), "k")
	mustPark(t, p, newOp(time.Hour), "k")
	_, err = p.TryCompleteElseWatch(newOp(time.Hour), "k")
	assert.ErrorIs(t, err, purgatory.ErrFull)

	_, err = purgatory.New[string, *mockOp]("neg", purgatory.WithMaxPending(-1))
	assert.ErrorIs(t, err, purgatory.ErrInvalidOption)
}

// A nil timer, or a typed nil, is refused by New instead of crashing the
// reaper (defect 6).
func TestWithNilTimer(t *testing.T) {
	_, err := purgatory.New[string, *mockOp]("nil", purgatory.WithTimer((*timer.SystemTimer)(nil)))
	assert.ErrorIs(t, err, purgatory.ErrInvalidOption)
	_, err = purgatory.New[string, *mockOp]("nil", purgatory.WithTimer(nil))
	assert.ErrorIs(t, err, purgatory.ErrInvalidOption)
}

// Regression (defect 4): an operation cancelled on one key was left on its
// other keys. Now CancelForKey takes it out whole; it cannot be parked
// again, and once dropped nothing reaches it.
func TestCancelledOperationIsReleased(t *testing.T) {
	p, mt := newMockPurgatory(t)
	o := newOp(time.Hour)
	mustPark(t, p, o, "a", "b", "c")
	assert.Equal(t, []*mockOp{o}, p.CancelForKey("a"))
	assert.Equal(t, 0, p.Watched())
	assert.Equal(t, 0, mt.Size())
	_, err := p.TryCompleteElseWatch(o, "d")
	assert.ErrorIs(t, err, purgatory.ErrAlreadyWatched)
	o.Ready.Store(true)
	assert.Equal(t, 0, p.CheckAndComplete("b"), "a check of another key leaves it alone")
	assert.Equal(t, int32(0), o.Completes.Load())

	wp := weak.Make(o)
	o = nil
	require.Eventually(t, func() bool { runtime.GC(); return wp.Value() == nil },
		30*time.Second, time.Millisecond, "a cancelled operation is still reachable")
	runtime.KeepAlive(p)
}

// Key churn (defect 3): operations on keys used once (a member id, a
// request id), each completed by a check of its key. Afterwards no key is
// left and the heap is back where it started, with no purge.
func TestKeyChurnReleasesKeys(t *testing.T) {
	n := 100_000
	if *full {
		n = 500_000
	}
	p, err := purgatory.New[operation.MemberKey, *mockOp]("churn", purgatory.WithoutTimer(), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	// Warm up: the shard maps grow to what the steady state needs.
	churn(t, p, 0, n/10)
	before := heapAlloc()
	churn(t, p, n/10, n)
	after := heapAlloc()
	st := p.Stats()
	assert.Equal(t, uint64(0), st.Purged, "no purge ran")
	assert.Equal(t, 0, st.Pending)
	assert.Equal(t, 0, st.Watched)
	t.Logf("heap before %d B, after %d B, over %d keys", before, after, n)
	assert.LessOrEqual(t, float64(after), float64(before)*1.05+64<<10,
		"heap grew with keys that are gone: %d -> %d B", before, after)
}

func churn(t *testing.T, p *purgatory.Purgatory[operation.MemberKey, *mockOp], from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		k := operation.MemberKey{GroupID: "g", MemberID: "member-" + strconv.Itoa(i)}
		o := newOp(time.Hour)
		if done, err := p.TryCompleteElseWatch(o, k); err != nil || done {
			t.Fatalf("park %d: %v %v", i, done, err)
		}
		o.Ready.Store(true)
		if p.CheckAndComplete(k) != 1 {
			t.Fatalf("check %d completed nothing", i)
		}
	}
}

// The storm: operations on random keys with short timeouts, parked from 2
// goroutines while 4 check, 1 force-completes and contexts are cancelled.
// Every operation ends exactly once, every counter returns to zero, the
// timer is empty, and the heap returns to its baseline.
func TestLifecycleStorm(t *testing.T) {
	n := 40_000
	if *full {
		n = 1_000_000
	}
	const keys = 2000
	y := new(tally)
	p, err := purgatory.New[int, *mockOp]("storm", purgatory.WithPurgeInterval(100), purgatory.WithObserver(y))
	require.NoError(t, err)
	before := heapAlloc()

	var recent [256]atomic.Pointer[mockOp] // for the forcer
	var cancels [256]atomic.Pointer[context.CancelFunc]
	var parked, refused atomic.Int64
	var completes atomic.Int64
	stop := make(chan struct{})
	var helpers, parkers sync.WaitGroup
	for g := range 2 {
		parkers.Add(1)
		go func() {
			defer parkers.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for i := range n / 2 {
				var o *mockOp
				timeout := time.Duration(r.IntN(20)) * time.Millisecond
				slot := r.IntN(len(recent))
				if r.IntN(8) == 0 {
					ctx, cancel := context.WithCancel(context.Background())
					o = newOp(timeout, operation.WithContext(ctx))
					cancels[slot].Store(&cancel)
				} else {
					o = newOp(timeout)
				}
				o.OnCompleteHook = func() { completes.Add(1) }
				o.Ready.Store(r.IntN(4) == 0)
				recent[slot].Store(o)
				k := r.IntN(keys)
				if _, err := p.TryCompleteElseWatch(o, k, (k+1+r.IntN(10))%keys); err != nil {
					refused.Add(1) // force-completed before its park
				} else {
					parked.Add(1)
				}
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	for g := range 4 { // checkers
		helpers.Add(1)
		go func() {
			defer helpers.Done()
			r := rand.New(rand.NewPCG(uint64(g), 10))
			for {
				select {
				case <-stop:
					return
				default:
				}
				p.CheckAndComplete(r.IntN(keys))
				runtime.Gosched() // leave the parkers their share of 2 cores
			}
		}()
	}
	helpers.Add(2)
	go func() { // forcer
		defer helpers.Done()
		r := rand.New(rand.NewPCG(1, 11))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if o := recent[r.IntN(len(recent))].Load(); o != nil {
				o.ForceComplete()
			}
			runtime.Gosched()
		}
	}()
	go func() { // contexts
		defer helpers.Done()
		r := rand.New(rand.NewPCG(1, 12))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c := cancels[r.IntN(len(cancels))].Swap(nil); c != nil {
				(*c)()
			}
			runtime.Gosched()
		}
	}()
	parkers.Wait()
	close(stop)
	helpers.Wait()
	for i := range cancels {
		if c := cancels[i].Swap(nil); c != nil {
			(*c)()
		}
	}
	// Everything left expires within 20 ms; wait for it.
	waitFor(t, func() bool { return p.NumDelayed() == 0 })
	st := p.Stats()
	checkTally(t, st, y, uint64(refused.Load()))
	ended := st.CompletedEarly + st.Expired + st.ContextDone
	assert.Equal(t, uint64(parked.Load()), ended, "every parked operation ended once: %+v", st)
	assert.Equal(t, parked.Load()+refused.Load(), completes.Load(), "OnComplete once per operation")
	assert.Equal(t, 0, st.Watched)
	assert.Equal(t, uint64(0), st.Panics)
	require.NoError(t, p.Shutdown(context.Background()))
	assert.Equal(t, uint64(0), p.Stats().Shutdown)
	for i := range recent {
		recent[i].Store(nil)
	}
	after := heapAlloc()
	t.Logf("%d operations: early %d, expired %d, context %d, purged %d; heap %d -> %d B",
		n, st.CompletedEarly, st.Expired, st.ContextDone, st.Purged, before, after)
	assert.Less(t, after, before+4<<20, "heap did not return to its baseline")
}
