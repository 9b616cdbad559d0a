package purgatory_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// mockOp is Kafka DelayedOperationTest's MockDelayedOperation.
type mockOp = optest.Op

func newOp(timeout time.Duration, opts ...operation.InitOption) *mockOp {
	return optest.New(timeout, opts...)
}

type pg = purgatory.Purgatory[string, *mockOp]

// newMockPurgatory returns a purgatory on a MockTimer with no reaper, shut
// down when the test ends. An observer (tally) is told of everything it
// does, and once it is shut down, must agree with its Stats.
func newMockPurgatory(t *testing.T, opts ...purgatory.Option) (*pg, *timer.MockTimer) {
	t.Helper()
	mt := timer.NewMockTimer()
	y := new(tally)
	p, err := purgatory.New[string, *mockOp]("mock", append([]purgatory.Option{purgatory.WithTimer(mt),
		purgatory.WithoutReaper(), purgatory.WithObserver(y)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, p.Shutdown(context.Background()))
		checkTally(t, p.Stats(), y, 0)
	})
	return p, mt
}

func mustPark(t *testing.T, p *pg, op *mockOp, keys ...string) {
	t.Helper()
	done, err := p.TryCompleteElseWatch(op, keys...)
	require.NoError(t, err)
	require.False(t, done)
}

// Reference: Kafka DelayedOperationTest.testRequestSatisfaction.
func TestRequestSatisfaction(t *testing.T) {
	p, _ := newMockPurgatory(t)
	r1, r2 := newOp(100*time.Second), newOp(100*time.Second)
	assert.Equal(t, 0, p.CheckAndComplete("test1"), "no operations watched yet")
	mustPark(t, p, r1, "test1")
	mustPark(t, p, r2, "test2")
	assert.Equal(t, 0, p.CheckAndComplete("test1"), "r1 not satisfied yet")
	assert.Equal(t, 0, p.CheckAndComplete("test2"), "r2 not satisfied yet")
	r1.Ready.Store(true)
	assert.Equal(t, 1, p.CheckAndComplete("test1"))
	assert.Equal(t, 0, p.CheckAndComplete("test2"))
	r2.Ready.Store(true)
	assert.Equal(t, 1, p.CheckAndComplete("test2"))
	assert.Equal(t, 0, p.CheckAndComplete("test2"), "already completed")
	assert.Equal(t, int32(1), r1.Completes.Load())
	assert.Equal(t, int32(0), r1.Expiries.Load())
	assert.Equal(t, uint64(2), p.Stats().CompletedEarly)
}

// An operation that is completable at once completes within the call and
// is never watched.
func TestCompletesWithinTryCompleteElseWatch(t *testing.T) {
	p, _ := newMockPurgatory(t)
	op := newOp(time.Second)
	op.Ready.Store(true)
	done, err := p.TryCompleteElseWatch(op, "k")
	require.NoError(t, err)
	assert.True(t, done)
	assert.Equal(t, 0, p.Watched())
	assert.Equal(t, 0, p.NumDelayed())
}

// Reference: Kafka DelayedOperationTest.testRequestExpiry, on a mock clock:
// an operation expires at its timeout, never before.
func TestRequestExpiry(t *testing.T) {
	p, mt := newMockPurgatory(t)
	r1, r2 := newOp(100*time.Millisecond), newOp(200*time.Millisecond)
	mustPark(t, p, r1, "test1")
	mustPark(t, p, r2, "test1", "test2")
	assert.Equal(t, 2, p.NumDelayed())

	mt.Advance(100*time.Millisecond - 1)
	assert.False(t, r1.IsCompleted(), "expired before its timeout")
	mt.Advance(1)
	assert.True(t, r1.IsCompleted())
	assert.True(t, r1.IsExpired())
	assert.False(t, r2.IsCompleted())
	mt.Advance(100 * time.Millisecond)
	assert.True(t, r2.IsExpired())
	for _, r := range []*mockOp{r1, r2} {
		assert.Equal(t, int32(1), r.Completes.Load())
		assert.Equal(t, int32(1), r.Expiries.Load())
	}
	assert.Equal(t, 0, p.NumDelayed())
	assert.Equal(t, uint64(2), p.Stats().Expired)
	assert.Equal(t, 0, p.Watched(), "expired operations are not counted as watched")
}

// Reference: Kafka DelayedOperationTest.testRequestPurge. Watched counts
// only operations still pending (Kafka's also counts completed ones until a
// purge). The purge drops completed entries once Kafka's estimate passes the
// purge interval and, beyond Kafka, once dead entries outnumber live ones.
func TestRequestPurge(t *testing.T) {
	p, _ := newMockPurgatory(t, purgatory.WithPurgeInterval(0))
	r1, r2, r3 := newOp(time.Hour), newOp(time.Hour), newOp(time.Hour)
	mustPark(t, p, r1, "test1")
	mustPark(t, p, r2, "test1", "test2")
	mustPark(t, p, r3, "test1", "test2", "test3")
	assert.Equal(t, 6, p.Watched())
	assert.Equal(t, 3, p.NumDelayed())

	assert.True(t, r1.ForceComplete())
	assert.True(t, r2.ForceComplete())
	assert.Equal(t, 1, p.NumDelayed())
	assert.Equal(t, 3, p.Watched(), "completed operations no longer count")

	p.AdvanceClock(0) // estimate 3 - 1 > 0, but 3 dead entries do not outnumber 3 live
	assert.Equal(t, uint64(0), p.Stats().Purged)

	assert.True(t, r3.ForceComplete())
	assert.Equal(t, 0, p.Watched())
	p.AdvanceClock(0)
	assert.Equal(t, uint64(6), p.Stats().Purged)
}

// A hot key's purge is done a slice at a time: one AdvanceClock visits
// about PurgeSliceSize entries, so that the reaper (which calls it in a
// loop) keeps expiring operations while a list of hundreds of thousands is
// purged, and the rest of the round follows on the next calls.
func TestPurgeOfAHotKeyInSteps(t *testing.T) {
	p, _ := newMockPurgatory(t)
	n := purgatory.PurgeSliceSize + purgatory.PurgeSliceSize/2
	ops := make([]*mockOp, n)
	for i := range ops {
		ops[i] = newOp(time.Hour)
		mustPark(t, p, ops[i], "hot")
	}
	for _, op := range ops[1:] {
		require.True(t, op.ForceComplete())
	}
	p.AdvanceClock(0)
	first := p.Stats().Purged
	assert.Positive(t, first)
	assert.LessOrEqual(t, first, uint64(purgatory.PurgeSliceSize+purgatory.PurgeSliceSlack), "one step")
	for i := 0; p.Stats().Purged < uint64(n-1); i++ {
		require.Less(t, i, 10, "the round does not end: %d purged", p.Stats().Purged)
		p.AdvanceClock(0)
	}
	assert.Equal(t, uint64(n-1), p.Stats().Purged)
	assert.Equal(t, 1, p.Watched())
	assert.Equal(t, 1, p.NumDelayed())
}

// Memory: an operation watched on two keys and completed via one is
// unreachable without waiting for a purge (KAFKA-19389).
func TestCompletedOperationBecomesUnreachable(t *testing.T) {
	p, _ := newMockPurgatory(t, purgatory.WithPurgeInterval(1<<30))
	op := newOp(time.Hour)
	mustPark(t, p, op, "a", "b")
	wp := weak.Make(op)
	op.Ready.Store(true)
	require.Equal(t, 1, p.CheckAndComplete("a"))
	op = nil
	require.Eventually(t, func() bool {
		runtime.GC()
		return wp.Value() == nil
	}, 10*time.Second, time.Millisecond, "a completed operation is still referenced")
	assert.Equal(t, 0, p.Watched())
}

// Reference: Kafka DelayedOperationTest.shouldCancelForKeyReturningCancelledOperations
// and shouldReturnNilOperationsOnCancelForKeyWhenKeyDoesntExist.
func TestCancelForKey(t *testing.T) {
	p, mt := newMockPurgatory(t)
	a, b, c := newOp(time.Second), newOp(time.Second), newOp(time.Second)
	mustPark(t, p, a, "key")
	mustPark(t, p, b, "key")
	mustPark(t, p, c, "key2")
	got := p.CancelForKey("key")
	assert.Equal(t, []*mockOp{a, b}, got)
	assert.Equal(t, 1, p.NumDelayed())
	assert.Equal(t, 1, p.Watched())
	assert.Equal(t, uint64(2), p.Stats().Cancelled)
	assert.Nil(t, p.CancelForKey("key"))
	assert.Nil(t, p.CancelForKey("missing"))
	mt.Advance(time.Hour)
	assert.Equal(t, int32(0), a.Completes.Load(), "a cancelled operation does not expire")
	assert.False(t, a.IsCompleted())
	assert.Equal(t, int32(1), c.Expiries.Load())
}

// recordingLocker records whether it is held, so TryComplete can check it.
type recordingLocker struct {
	mu     sync.Mutex
	held   atomic.Bool
	counts atomic.Int32
}

func (l *recordingLocker) Lock()   { l.mu.Lock(); l.held.Store(true); l.counts.Add(1) }
func (l *recordingLocker) Unlock() { l.held.Store(false); l.mu.Unlock() }

type lockCheckOp struct {
	mockOp
	lock     *recordingLocker
	unlocked atomic.Int32
}

func (o *lockCheckOp) TryComplete() bool {
	if !o.lock.held.Load() {
		o.unlocked.Add(1)
	}
	return o.mockOp.TryComplete()
}

// Reference: Kafka DelayedOperationTest.checkRequestLockedWithoutLockOpt /
// testDelayedOperationLock: TryComplete always runs under the operation's
// (here shared) lock, in TryCompleteElseWatch and in CheckAndComplete.
func TestTryCompleteHoldsTheLock(t *testing.T) {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *lockCheckOp]("lock", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	l := &recordingLocker{}
	op := &lockCheckOp{lock: l}
	op.Init(op, time.Second, operation.WithLock(l))
	done, err := p.TryCompleteElseWatch(op, "k")
	require.NoError(t, err)
	require.False(t, done)
	assert.Equal(t, int32(1), l.counts.Load(), "one lock across both checks and the watch")
	op.Ready.Store(true)
	assert.Equal(t, 1, p.CheckAndComplete("k"))
	assert.Equal(t, int32(0), op.unlocked.Load())
	assert.False(t, l.held.Load())
}

// Reference: Kafka DelayedOperationTest.testSafeTryCompleteOrElse: the
// watch runs only when the first check fails. Kafka then always tries the
// operation once more, for a check that ran before it was watched; here
// that last try is made only when such a check may have run, or when a
// check found the operation's lock held and left a note, so an operation
// parked with no check in between costs one TryComplete, not two.
func TestTryCompleteElseWatchTriesAgainOnlyAfterACheck(t *testing.T) {
	p, _ := newMockPurgatory(t)
	op := newOp(time.Second)
	op.Ready.Store(true)
	done, err := p.TryCompleteElseWatch(op, "a")
	require.NoError(t, err)
	assert.True(t, done)
	assert.Equal(t, 0, p.Watched(), "nothing is watched when the first check completes")
	assert.Equal(t, 0, p.CheckAndComplete("a"))

	op = newOp(time.Second)
	done, err = p.TryCompleteElseWatch(op, "a", "b")
	require.NoError(t, err)
	assert.False(t, done)
	assert.Equal(t, int32(1), op.Tries.Load(), "no check ran while it was being watched: one try")
	op.ForceComplete()

	// A check on a key the operation is not yet watched on (it cannot
	// find it), and a check on one it is watched on (it finds the lock
	// held): either way the last try is made, and sees Ready.
	for _, c := range []struct {
		at  purgatory.Step
		key string
	}{
		{purgatory.StepTried, "a"},
		{purgatory.StepTried, "b"},
		{purgatory.StepBetweenKeys, "b"},
		{purgatory.StepBetweenKeys, "a"},
		{purgatory.StepWatched, "b"},
	} {
		op := newOp(time.Second)
		restore := purgatory.SetStepHook(p, func(s purgatory.Step) {
			if s == c.at {
				op.Ready.Store(true)
				assert.Equal(t, 0, p.CheckAndComplete(c.key))
			}
		})
		done, err := p.TryCompleteElseWatch(op, "a", "b")
		restore()
		require.NoError(t, err)
		assert.True(t, done, "a check on %q at step %d", c.key, c.at)
		assert.Equal(t, int32(2), op.Tries.Load(), "a check on %q at step %d", c.key, c.at)
		assert.Equal(t, int32(1), op.Completes.Load())
	}
	assert.Equal(t, 0, p.NumDelayed())

	// A check between the marking of the keys and the first try counts
	// after the mark, but the first try already sees its change.
	op = newOp(time.Second)
	restore := purgatory.SetStepHook(p, func(s purgatory.Step) {
		if s == purgatory.StepParked {
			op.Ready.Store(true)
			assert.Equal(t, 0, p.CheckAndComplete("b"))
		}
	})
	done, err = p.TryCompleteElseWatch(op, "a", "b")
	restore()
	require.NoError(t, err)
	assert.True(t, done)
	assert.Equal(t, int32(1), op.Tries.Load(), "completed by the first try")

	// A change made with no check after it is not a wake-up: the
	// operation waits for the check, as one already watched would.
	op = newOp(time.Second)
	restore = purgatory.SetStepHook(p, func(s purgatory.Step) {
		if s == purgatory.StepTried {
			op.Ready.Store(true)
		}
	})
	done, err = p.TryCompleteElseWatch(op, "a", "b")
	restore()
	require.NoError(t, err)
	assert.False(t, done)
	assert.Equal(t, 1, p.CheckAndComplete("b"))
	assert.Equal(t, int32(1), op.Completes.Load())
	assert.Equal(t, 0, p.NumDelayed())
}

// Reference: Kafka DelayedOperationTest.testTryCompleteWithMultipleThreads:
// 100 operations that complete after a random number of checks, checked
// from 20 goroutines with random pauses.
func TestTryCompleteWithManyGoroutines(t *testing.T) {
	p, err := purgatory.New[string, *countdownOp]("threads", purgatory.WithPurgeInterval(10))
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	ops := make([]*countdownOp, 100)
	for i := range ops {
		o := &countdownOp{}
		o.left.Store(int32(rand.IntN(20) + 3)) // two checks happen while parking
		o.Init(o, 30*time.Second)
		done, err := p.TryCompleteElseWatch(o, "key")
		require.NoError(t, err)
		require.False(t, done)
		ops[i] = o
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				p.CheckAndComplete("key")
			}
		}()
	}
	wg.Wait()
	for _, o := range ops {
		assert.True(t, o.IsCompleted())
		assert.Equal(t, int32(1), o.completes.Load())
	}
	assert.Equal(t, 0, p.NumDelayed())
	assert.Equal(t, 0, p.Watched())
}

type countdownOp struct {
	operation.Base
	left      atomic.Int32
	completes atomic.Int32
}

func (o *countdownOp) TryComplete() bool {
	if o.left.Add(-1) <= 0 {
		return o.ForceComplete()
	}
	return false
}
func (o *countdownOp) OnComplete()   { o.completes.Add(1) }
func (o *countdownOp) OnExpiration() {}

func TestBadInput(t *testing.T) {
	p, _ := newMockPurgatory(t)
	_, err := p.TryCompleteElseWatch(newOp(time.Second))
	assert.ErrorIs(t, err, purgatory.ErrNoKeys)
	_, err = p.TryCompleteElseWatch(nil, "k")
	assert.ErrorIs(t, err, purgatory.ErrNilOperation)
	_, err = p.TryCompleteElseWatch(&mockOp{}, "k")
	assert.ErrorIs(t, err, purgatory.ErrNotInitialised)
	assert.EqualError(t, err, "purgatory: operation not initialised: call Base.Init", "one line that names the fix")
	op := newOp(time.Second)
	mustPark(t, p, op, "k")
	_, err = p.TryCompleteElseWatch(op, "k2")
	assert.ErrorIs(t, err, purgatory.ErrAlreadyWatched)
	assert.Equal(t, 1, p.Watched(), "a refused call parks nothing")
	assert.Equal(t, 1, p.NumDelayed())
	many := make([]string, 1<<21) // one over the 2^21-1 that 21 bits count
	_, err = p.TryCompleteElseWatch(newOp(time.Second), many...)
	assert.ErrorIs(t, err, purgatory.ErrTooManyKeys)
	_, err = p.TryCompleteElseWatch(newOp(time.Second), many[1:]...)
	assert.NoError(t, err, "2^21-1 keys park")
	assert.Equal(t, 2, p.NumDelayed())

	_, err = purgatory.New[string, *mockOp]("bad", purgatory.WithPurgeInterval(-1))
	assert.ErrorIs(t, err, purgatory.ErrInvalidOption)
	_, err = purgatory.New[string, *mockOp]("bad", purgatory.WithTimerOptions(timer.WithTick(0)))
	assert.ErrorIs(t, err, timer.ErrInvalidOption)
	assert.Panics(t, func() { (&mockOp{}).Init(newOp(0), time.Second) }, "Init with another operation")
}

// Shutdown expires every pending operation, is idempotent, refuses new
// work, and leaves no goroutine (goleak checks in TestMain).
func TestShutdownExpiresPending(t *testing.T) {
	p, err := purgatory.New[string, *mockOp]("shutdown")
	require.NoError(t, err)
	ops := []*mockOp{newOp(time.Hour), newOp(time.Hour)}
	mustPark(t, p, ops[0], "a")
	mustPark(t, p, ops[1], "a", "b")
	require.NoError(t, p.Shutdown(context.Background()))
	require.NoError(t, p.Shutdown(context.Background()), "idempotent")
	for _, o := range ops {
		assert.Equal(t, int32(1), o.Completes.Load())
		assert.Equal(t, int32(1), o.Expiries.Load())
	}
	assert.Equal(t, 0, p.NumDelayed())
	_, err = p.TryCompleteElseWatch(newOp(time.Second), "a")
	assert.ErrorIs(t, err, purgatory.ErrShutdown)
}

func TestShutdownCanLeavePending(t *testing.T) {
	p, err := purgatory.New[string, *mockOp]("leave", purgatory.WithLeavePendingOnShutdown())
	require.NoError(t, err)
	op := newOp(time.Hour)
	mustPark(t, p, op, "a")
	require.NoError(t, p.Shutdown(context.Background()))
	assert.False(t, op.IsCompleted())
}

// Callbacks may call back into the same or another purgatory without
// deadlock, although Go's mutexes are not re-entrant.
func TestReentrantCallbacks(t *testing.T) {
	p, _ := newMockPurgatory(t)
	other, _ := newMockPurgatory(t)
	b := newOp(time.Hour)
	mustPark(t, p, b, "b")
	a := newOp(time.Hour)
	a.OnCompleteHook = func() {
		p.CheckAndComplete("a") // a's own key, while a's lock is held
		b.Ready.Store(true)
		p.CheckAndComplete("b")
		c := newOp(time.Hour)
		_, err := other.TryCompleteElseWatch(c, "c")
		assert.NoError(t, err)
		_, err = p.TryCompleteElseWatch(newOp(time.Hour), "a")
		assert.NoError(t, err)
	}
	mustPark(t, p, a, "a")
	a.Ready.Store(true)
	done := make(chan int)
	go func() { done <- p.CheckAndComplete("a") }()
	select {
	case n := <-done:
		assert.Equal(t, 1, n)
	case <-time.After(30 * time.Second):
		t.Fatal("deadlock in a re-entrant callback")
	}
	assert.True(t, b.IsCompleted())
	assert.Equal(t, 1, other.NumDelayed())
}

// Re-entrancy through a shared lock: an operation completing under the
// shared lock checks another operation that shares it.
func TestReentrantCheckWithSharedLock(t *testing.T) {
	p, _ := newMockPurgatory(t)
	var shared operation.SharedLock
	b := newOp(time.Hour, operation.WithLock(&shared))
	a := newOp(time.Hour, operation.WithLock(&shared))
	mustPark(t, p, b, "b")
	mustPark(t, p, a, "a")
	a.OnCompleteHook = func() {
		b.Ready.Store(true)
		p.CheckAndComplete("b") // b's lock is held by this goroutine
	}
	a.Ready.Store(true)
	done := make(chan struct{})
	go func() { p.CheckAndComplete("a"); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("deadlock with a shared lock")
	}
	assert.True(t, b.IsCompleted(), "the check skipped under the held lock was retried on unlock")
}

type panicOp struct {
	mockOp
	where string
}

func (o *panicOp) TryComplete() bool {
	if o.where == "TryComplete" && o.Ready.Load() {
		panic("try")
	}
	return o.mockOp.TryComplete()
}
func (o *panicOp) OnComplete() {
	o.mockOp.OnComplete()
	if o.where == "OnComplete" {
		panic("complete")
	}
}
func (o *panicOp) OnExpiration() {
	o.mockOp.OnExpiration()
	if o.where == "OnExpiration" {
		panic("expire")
	}
}

// A panic in a callback is recovered and counted, leaves the operation
// completed (for OnComplete and OnExpiration), and the purgatory working.
func TestPanickingCallbacks(t *testing.T) {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *panicOp]("panics", purgatory.WithTimer(mt), purgatory.WithoutReaper(),
		purgatory.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	mk := func(where string) *panicOp {
		o := &panicOp{where: where}
		o.Init(o, time.Second)
		_, err := p.TryCompleteElseWatch(o, where)
		require.NoError(t, err)
		return o
	}
	tc, oc, oe := mk("TryComplete"), mk("OnComplete"), mk("OnExpiration")
	tc.Ready.Store(true)
	assert.Equal(t, 0, p.CheckAndComplete("TryComplete"))
	assert.False(t, tc.IsCompleted())
	oc.Ready.Store(true)
	assert.Equal(t, 1, p.CheckAndComplete("OnComplete"))
	assert.True(t, oc.IsCompleted())
	mt.Advance(time.Second)
	assert.True(t, oe.IsExpired())
	assert.True(t, tc.IsExpired(), "the operation whose TryComplete panicked still expires")
	assert.Equal(t, uint64(3), p.Stats().Panics)
	assert.Equal(t, 0, p.NumDelayed())

	again := &panicOp{}
	again.Init(again, time.Second)
	again.Ready.Store(true)
	done, err := p.TryCompleteElseWatch(again, "x")
	require.NoError(t, err)
	assert.True(t, done, "the purgatory works after panics")
}

// Heterogeneous keys through K = any.
func TestHeterogeneousKeys(t *testing.T) {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[any, *mockOp]("any", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	tp := operation.TopicPartitionKey{Topic: "t", Partition: 1}
	op := newOp(time.Second)
	done, err := p.TryCompleteElseWatch(op, tp, operation.GroupJoinKey{GroupID: "g"}, "plain")
	require.NoError(t, err)
	require.False(t, done)
	op.Ready.Store(true)
	assert.Equal(t, 0, p.CheckAndComplete(operation.TopicPartitionKey{Topic: "t", Partition: 2}))
	assert.Equal(t, 1, p.CheckAndComplete(operation.TopicPartitionKey{Topic: "t", Partition: 1}))
	assert.Equal(t, 0, p.Watched())
}
