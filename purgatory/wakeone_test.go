package purgatory_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// receiver is a queue's long-poll receive: its TryComplete claims a
// message, if one is there, and completes with it.
type receiver struct {
	operation.Base
	q         *atomic.Int64 // messages on the queue
	claimed   atomic.Bool
	stranded  atomic.Bool // claimed, but its ForceComplete lost
	completes atomic.Int32
	// during, if set, runs after the claim and before the ForceComplete.
	during func()
	// panics makes TryComplete panic before it claims anything.
	panics bool
}

func newReceiver(q *atomic.Int64) *receiver {
	r := &receiver{q: q}
	r.Init(r, time.Hour)
	return r
}

func (r *receiver) TryComplete() bool {
	if r.panics {
		panic("boom")
	}
	if r.q.Add(-1) < 0 {
		r.q.Add(1)
		return false
	}
	r.claimed.Store(true)
	if r.during != nil {
		r.during()
	}
	if !r.ForceComplete() {
		r.stranded.Store(true)
		return false
	}
	return true
}

func (r *receiver) OnComplete()   { r.completes.Add(1) }
func (r *receiver) OnExpiration() {}

type queue = purgatory.Purgatory[string, *receiver]

func newQueue(t testing.TB) (*queue, *timer.MockTimer) {
	t.Helper()
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *receiver]("queue", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Shutdown(context.Background())) })
	return p, mt
}

func parkReceiver(t testing.TB, p *queue, r *receiver) {
	t.Helper()
	done, err := p.TryCompleteElseWatch(r, "q")
	require.NoError(t, err)
	require.False(t, done)
}

// parkReceivers parks n receivers of q on "q", in order.
func parkReceivers(t testing.TB, p *queue, q *atomic.Int64, n int) []*receiver {
	t.Helper()
	rs := make([]*receiver, n)
	for i := range rs {
		rs[i] = newReceiver(q)
		parkReceiver(t, p, rs[i])
	}
	return rs
}

// One message wakes one receiver: the one that waited longest.
func TestCheckAndCompleteNWakesTheOldest(t *testing.T) {
	p, _ := newQueue(t)
	var q atomic.Int64
	rs := parkReceivers(t, p, &q, 100)
	q.Store(3)
	assert.Equal(t, 3, p.CheckAndCompleteN("q", 3))
	for i, r := range rs {
		assert.Equal(t, i < 3, r.IsCompleted(), "receiver %d", i)
	}
	assert.Equal(t, 0, p.CheckAndCompleteN("q", 1), "no message, no wake-up")
	q.Store(1)
	assert.Equal(t, 0, p.CheckAndCompleteN("q", 0), "n < 1 completes nothing")
	assert.Equal(t, 1, p.CheckAndCompleteN("q", 1))
	assert.True(t, rs[3].IsCompleted())
	assert.Equal(t, 96, p.NumDelayed())
	assert.Equal(t, 96, p.Watched())
	assert.Equal(t, uint64(4), p.Stats().CompletedEarly)
}

// A panic in a TryComplete that a check tries is recovered and counted;
// the operation's lock is let go, and the check goes on with the next.
func TestCheckRecoversAPanicAndGoesOn(t *testing.T) {
	p, _ := newQueue(t)
	var q atomic.Int64
	rs := parkReceivers(t, p, &q, 5)
	rs[1].panics = true
	q.Store(2)
	assert.Equal(t, 2, p.CheckAndComplete("q"), "receivers 0 and 2 complete")
	assert.True(t, rs[0].IsCompleted())
	assert.False(t, rs[1].IsCompleted(), "the panic declined")
	assert.True(t, rs[2].IsCompleted())
	assert.Equal(t, uint64(1), p.Stats().Panics)
	// Its lock was let go: Complete, which waits for it, returns.
	assert.True(t, p.Complete(rs[1], errGone))
	assert.Equal(t, errGone, rs[1].Cause())
}

// A TryComplete that calls runtime.Goexit (a test's t.FailNow) lets go of
// the operation's lock on the way out.
func TestCheckGoexitLetsTheLockGo(t *testing.T) {
	p, _ := newQueue(t)
	var q atomic.Int64
	r := newReceiver(&q)
	parkReceiver(t, p, r)
	r.during = func() { runtime.Goexit() }
	q.Store(1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.CheckAndComplete("q")
	}()
	<-done
	assert.False(t, r.IsCompleted())
	assert.True(t, p.Complete(r, errGone), "the lock is free")
}

var errGone = errors.New("client gone")

func TestCompleteSemantics(t *testing.T) {
	p, _ := newQueue(t)
	var q atomic.Int64
	r := newReceiver(&q)
	assert.False(t, p.Complete(r, errGone), "not parked")
	parkReceiver(t, p, r)
	other, _ := newQueue(t)
	assert.False(t, other.Complete(r, errGone), "parked in another purgatory")
	assert.True(t, p.Complete(r, errGone))
	assert.False(t, p.Complete(r, errGone), "completed already")
	assert.Equal(t, errGone, r.Cause())
	assert.Equal(t, int32(1), r.completes.Load())
	assert.False(t, r.IsExpired())
	st := p.Stats()
	assert.Equal(t, uint64(1), st.CompletedForKey)
	assert.Equal(t, 0, st.Pending)
	assert.Zero(t, p.Watched())
	assert.False(t, p.Complete(nil, errGone))

	// A nil cause is allowed: Cause reports nil, as for an early completion.
	r2 := newReceiver(&q)
	parkReceiver(t, p, r2)
	assert.True(t, p.Complete(r2, nil))
	assert.NoError(t, r2.Cause())
	assert.Equal(t, uint64(2), p.Stats().CompletedForKey)
}

// Complete waits for a TryComplete of the operation under way: the claim
// that TryComplete made is completed by it, and Complete reports false.
// (ForceComplete, which takes no lock, would win here, and strand the
// claimed message.)
func TestCompleteWaitsForATryCompleteUnderWay(t *testing.T) {
	p, _ := newQueue(t)
	waiting := make(chan struct{}, 1)
	purgatory.SetContendedHook(p, func(*lifecycle.Op) { waiting <- struct{}{} })
	var q atomic.Int64
	r := newReceiver(&q)
	parkReceiver(t, p, r)
	won := make(chan bool, 1)
	r.during = func() {
		go func() { won <- p.Complete(r, errGone) }()
		<-waiting // Complete is about to wait for the lock this TryComplete holds
	}
	q.Store(1)
	assert.Equal(t, 1, p.CheckAndCompleteN("q", 1))
	assert.False(t, <-won)
	assert.True(t, r.claimed.Load())
	assert.False(t, r.stranded.Load())
	assert.NoError(t, r.Cause())
	assert.Equal(t, int32(1), r.completes.Load())
}

// A hang-up races a send for many rounds: whoever wins, OnComplete runs
// once, exactly one of the two completes the receiver, and a message the
// receiver claimed is never stranded. 20,000 rounds; 200,000 with -full.
func TestCompleteNeverStrandsAClaim(t *testing.T) {
	rounds := 20_000
	if *full {
		rounds = 200_000
	}
	p, _ := newQueue(t)
	var q atomic.Int64
	var check, hangup sync.WaitGroup
	for range rounds {
		q.Store(0)
		r := newReceiver(&q)
		parkReceiver(t, p, r)
		start := make(chan struct{})
		var woken int
		var won bool
		check.Add(1)
		go func() {
			defer check.Done()
			<-start
			q.Add(1)
			woken = p.CheckAndCompleteN("q", 1)
		}()
		hangup.Add(1)
		go func() {
			defer hangup.Done()
			<-start
			won = p.Complete(r, errGone)
		}()
		close(start)
		check.Wait()
		hangup.Wait()
		if r.stranded.Load() {
			t.Fatal("a claimed message was stranded")
		}
		require.Equal(t, int32(1), r.completes.Load(), "OnComplete once")
		require.True(t, won != (woken == 1), "exactly one winner (hang-up %v, check %d)", won, woken)
		if won {
			require.False(t, r.claimed.Load(), "a receiver ended by its hang-up claimed nothing")
			require.Equal(t, int64(1), q.Load(), "the message is still there")
			require.Equal(t, errGone, r.Cause())
		} else {
			require.True(t, r.claimed.Load())
			require.Zero(t, q.Load())
			require.NoError(t, r.Cause())
		}
	}
	assert.Zero(t, p.NumDelayed())
}

// Neither CheckAndComplete nor CheckAndCompleteN allocates, however many
// operations watch the key; nor does Complete with a cause it has seen.
func TestWakeOneAllocatesNothing(t *testing.T) {
	for _, n := range []int{1, 100, 4096, 10000} {
		p, _ := newQueue(t)
		var q atomic.Int64
		parkReceivers(t, p, &q, n)
		assert.Zero(t, testing.AllocsPerRun(20, func() { p.CheckAndComplete("q") }), "%d watching", n)
		assert.Zero(t, testing.AllocsPerRun(20, func() { p.CheckAndCompleteN("q", 1) }), "%d watching", n)
	}
	p, _ := newQueue(t)
	var q atomic.Int64
	rs := parkReceivers(t, p, &q, 102)
	i := 0
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if !p.Complete(rs[i], errGone) {
			t.Fatal("not completed")
		}
		i++
	}))
	assert.Equal(t, errGone, rs[50].Cause())
}

// A park deferred to the holder of the operation's SharedLock reported the
// operation parked: Complete, which waits for the lock, finds it parked
// once the holder lets go, and completes it.
func TestCompleteOfADeferredPark(t *testing.T) {
	p, _ := newMockPurgatory(t)
	lock := &operation.SharedLock{}
	op := newOp(time.Hour, operation.WithLock(lock))
	lock.Lock()
	mustPark(t, p, op, "k") // deferred: the lock is held
	won := make(chan bool, 1)
	go func() { won <- p.Complete(op, errGone) }()
	runtime.Gosched()
	lock.Unlock() // the park runs, then Complete has the lock
	assert.True(t, <-won)
	assert.Equal(t, errGone, op.Cause())
	assert.Zero(t, p.NumDelayed())
	assert.Equal(t, uint64(1), p.Stats().CompletedForKey)
}

// Complete beside the other ways out: after Shutdown (which expired the
// operation, or left it pending with WithLeavePendingOnShutdown), on an
// operation with a context, and before an Advance past its deadline.
func TestCompleteMeetsTheOtherWaysOut(t *testing.T) {
	t.Run("after shutdown", func(t *testing.T) {
		p, _ := newMockPurgatory(t)
		op := newOp(time.Hour)
		mustPark(t, p, op, "k")
		require.NoError(t, p.Shutdown(context.Background()))
		assert.False(t, p.Complete(op, errGone), "Shutdown expired it")
		assert.ErrorIs(t, op.Cause(), purgatory.ErrShutdown)
	})
	t.Run("left pending by shutdown", func(t *testing.T) {
		p, _ := newMockPurgatory(t, purgatory.WithLeavePendingOnShutdown())
		op := newOp(time.Hour)
		mustPark(t, p, op, "k")
		require.NoError(t, p.Shutdown(context.Background()))
		assert.True(t, p.Complete(op, errGone), "a pending operation is still the purgatory's to complete")
		assert.Equal(t, errGone, op.Cause())
		assert.Zero(t, p.NumDelayed())
	})
	t.Run("context", func(t *testing.T) {
		p, _ := newMockPurgatory(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		op := newOp(time.Hour, operation.WithContext(ctx))
		mustPark(t, p, op, "k")
		assert.True(t, p.Complete(op, errGone))
		cancel()
		assert.Equal(t, errGone, op.Cause(), "the context ending later changes nothing")
		assert.Equal(t, int32(1), op.Completes.Load())
		assert.Zero(t, p.Stats().ContextDone)
	})
	t.Run("expiry", func(t *testing.T) {
		p, mt := newMockPurgatory(t)
		op := newOp(10 * time.Millisecond)
		mustPark(t, p, op, "k")
		assert.True(t, p.Complete(op, errGone))
		assert.Zero(t, mt.Advance(time.Second), "its timeout left with it")
		assert.False(t, op.IsExpired())
		assert.Zero(t, op.Expiries.Load())
	})
}

// CheckAndCompleteN keeps park order across operations with something of
// their own (a SharedLock, a lock of the user's, a context), which a check
// tries through the locked path, and plain ones, which it tries in one
// compare-and-swap; an Observer counts every try.
func TestCheckAndCompleteNOrderAcrossKindsOfOperation(t *testing.T) {
	p, _ := newMockPurgatory(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	ops := []*mockOp{
		newOp(time.Hour, operation.WithLock(&operation.SharedLock{})),
		newOp(time.Hour),
		newOp(time.Hour, operation.WithContext(ctx)),
		newOp(time.Hour, operation.WithLock(&mu)),
		newOp(time.Hour),
	}
	for _, o := range ops {
		mustPark(t, p, o, "k")
		o.Ready.Store(true)
	}
	for i, o := range ops {
		require.Equal(t, 1, p.CheckAndCompleteN("k", 1), "round %d", i)
		assert.True(t, o.IsCompleted(), "the oldest, op %d", i)
		for _, later := range ops[i+1:] {
			assert.False(t, later.IsCompleted())
		}
	}
	assert.Zero(t, p.NumDelayed())
	assert.Zero(t, p.Watched())
}

// Complete racing CompleteForKey: one of them completes the operation,
// and Cause reports the winner's cause.
func TestCompleteRacingCompleteForKey(t *testing.T) {
	p, _ := newMockPurgatory(t)
	errKey := errors.New("key gone")
	rounds := 2000
	if *full {
		rounds = 20000
	}
	for range rounds {
		op := newOp(time.Hour)
		mustPark(t, p, op, "k")
		var won bool
		var n int
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); won = p.Complete(op, errGone) }()
		go func() { defer wg.Done(); n = p.CompleteForKey("k", errKey) }()
		wg.Wait()
		require.True(t, won != (n == 1), "one winner: Complete %v, CompleteForKey %d", won, n)
		if won {
			require.Equal(t, errGone, op.Cause())
		} else {
			require.Equal(t, errKey, op.Cause())
		}
		require.Equal(t, int32(1), op.Completes.Load())
	}
	assert.Equal(t, uint64(rounds), p.Stats().CompletedForKey)
}
