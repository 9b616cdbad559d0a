package purgatory_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Regression (issue 35, 1): in a purgatory of an interface type, an
// interface holding a nil pointer is a nil operation, refused with
// ErrNilOperation rather than dereferenced.
func TestTypedNilInInterfacePurgatory(t *testing.T) {
	t.Parallel()
	p, err := purgatory.New[string, operation.DelayedOperation]("iface",
		purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	var op *mockOp
	done, err := p.TryCompleteElseWatch(op, "k")
	assert.ErrorIs(t, err, purgatory.ErrNilOperation)
	assert.False(t, done)
	assert.False(t, p.ResetTimeout(op, time.Second))
	assert.Zero(t, p.NumDelayed())

	// A real operation in the same purgatory still parks.
	real := newOp(time.Second)
	_, err = p.TryCompleteElseWatch(real, "k")
	require.NoError(t, err)
	assert.Equal(t, 1, p.NumDelayed())
}

// Regression (issue 35, 2): a ResetTimeout made while the operation's park
// is under way (between its watches and its own Add of the timeout) keeps
// the deadline it measured. The park used to add the timeout again after
// it, measuring the deadline anew: after a clock move in between, later.
func TestResetDuringParkKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	for _, step := range []purgatory.Step{purgatory.StepParked, purgatory.StepTried, purgatory.StepWatched} {
		t.Run(step.String(), func(t *testing.T) {
			p, mt := newMockPurgatory(t)
			op := newOp(time.Hour)
			reset := false
			restore := purgatory.SetStepHook(p, func(s purgatory.Step) {
				if s != step {
					return
				}
				// Another goroutine's heartbeat: the operation is pending
				// from the park's swap on, so the reset takes it. Then the
				// clock moves before the park ends.
				reset = p.ResetTimeout(op, 10*time.Millisecond)
				mt.Advance(5 * time.Millisecond)
			})
			_, err := p.TryCompleteElseWatch(op, "a")
			restore()
			require.NoError(t, err)
			require.True(t, reset, "the reset found the operation pending")
			assert.Equal(t, 10*time.Millisecond, op.Timeout())
			assert.Zero(t, mt.Advance(5*time.Millisecond-1), "not before its deadline")
			assert.False(t, op.IsCompleted())
			assert.Equal(t, 1, mt.Advance(1), "at the deadline the reset measured, 10 ms after it")
			assert.True(t, op.IsExpired())
			assert.Zero(t, mt.Size())
		})
	}
}

// The same when the reset's deadline comes while the park still holds the
// lock: the expiry it fires waits for the lock, and then expires the
// operation in that Advance. The park used to add the timeout anew, and
// the expiry, finding its entry moved, did nothing.
func TestResetDeadlineFiredDuringPark(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	waiting := make(chan struct{}, 1)
	purgatory.SetContendedHook(p, func(*lifecycle.Op) { waiting <- struct{}{} })
	op := newOp(time.Hour)
	advanced := make(chan int, 1)
	restore := purgatory.SetStepHook(p, func(s purgatory.Step) {
		if s != purgatory.StepWatched {
			return
		}
		require.True(t, p.ResetTimeout(op, 10*time.Millisecond))
		go func() { advanced <- mt.Advance(15 * time.Millisecond) }()
		<-waiting // the expiry of the reset's deadline waits for the park's lock
	})
	_, err := p.TryCompleteElseWatch(op, "a")
	restore()
	require.NoError(t, err)
	assert.Equal(t, 1, <-advanced, "the Advance past the reset's deadline expires it")
	assert.True(t, op.IsExpired())
	assert.Zero(t, mt.Size())
}

// fieldless is an operation with no fields of its own, whose every byte
// is the library's.
type fieldless struct{ operation.Base }

func (f *fieldless) TryComplete() bool { return f.ForceComplete() }
func (*fieldless) OnComplete()         {}
func (*fieldless) OnExpiration()       {}

// Regression (issue 35, 3): an operation that has completed keeps nothing
// of the purgatory's (its Handle used to stay, 16 bytes, for as long as
// the user kept the operation): what the user keeps of 100,000 completed
// operations is the operations themselves.
func TestCompletedOperationsHoldNoHandle(t *testing.T) {
	const n = 100_000
	p, err := purgatory.New[int, *fieldless]("kept",
		purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	ops := make([]*fieldless, n)
	opsOnly := heapInUse()
	for i := range ops {
		ops[i] = &fieldless{}
		ops[i].Init(ops[i], 100*time.Millisecond)
	}
	opsOnly = heapInUse() - opsOnly
	before := heapInUse()
	for i, op := range ops {
		// A check of the key completes it: TryComplete is true now.
		lifecycle.Of(op) // (the operation is whole; nothing to do)
		_, err := p.TryCompleteElseWatch(op, i%100, 100+i%100, 200+i%100)
		require.NoError(t, err)
	}
	for k := range 300 {
		p.CheckAndComplete(k) // drops the keys' tombstones
	}
	kept := heapInUse() - before
	require.Equal(t, uint64(n), p.Stats().CompletedEarly)
	assert.Less(t, float64(kept)/n, 4.0,
		"bytes a completed operation keeps beyond itself (%d bytes an operation)", opsOnly/n)
	runtime.KeepAlive(ops)
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// careless returns true from TryComplete once ready, without calling
// ForceComplete: the slip the docs' own examples invite.
type careless struct {
	optest.Op
}

func (c *careless) TryComplete() bool {
	c.Tries.Add(1)
	return c.Ready.Load()
}

func newCareless(timeout time.Duration) *careless {
	c := &careless{}
	c.Init(c, timeout)
	return c
}

// Regression (issue 35, 5): a TryComplete that reports true without
// completing its operation no longer leaves it hanging (pending, its
// timeout and checks finding nothing to do, Shutdown leaving it): the
// purgatory completes it, early, counts it, and logs the misuse once.
func TestTryCompleteTrueWithoutCompleting(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"park", "check"} {
		t.Run(at, func(t *testing.T) {
			var logs bytes.Buffer
			mt := timer.NewMockTimer()
			p, err := purgatory.New[string, *careless]("careless", purgatory.WithTimer(mt),
				purgatory.WithoutReaper(), purgatory.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			require.NoError(t, err)
			ops := []*careless{newCareless(100 * time.Millisecond), newCareless(100 * time.Millisecond)}
			for _, op := range ops {
				op.Ready.Store(at == "park")
				done, err := p.TryCompleteElseWatch(op, "k")
				require.NoError(t, err)
				assert.Equal(t, at == "park", done)
			}
			if at == "check" {
				for _, op := range ops {
					op.Ready.Store(true)
				}
				assert.Equal(t, 2, p.CheckAndComplete("k"))
			}
			for _, op := range ops {
				assert.True(t, op.IsCompleted())
				assert.NoError(t, op.Cause(), "an early completion")
				assert.Equal(t, int32(1), op.Completes.Load())
			}
			st := p.Stats()
			assert.Equal(t, uint64(2), st.CompletedEarly)
			assert.Zero(t, st.Pending)
			assert.Zero(t, st.Watched)
			assert.Zero(t, mt.Size(), "no timeout left behind")
			require.NoError(t, p.Shutdown(context.Background()))
			assert.Zero(t, p.Stats().Shutdown)
			assert.Equal(t, 1, strings.Count(logs.String(), "TryComplete returned true without completing"),
				"logged once: %s", logs.String())
		})
	}
}

// countingTimer counts its AdvanceClock calls.
type countingTimer struct {
	timer.Timer
	calls atomic.Int64
}

func (c *countingTimer) AdvanceClock(d time.Duration) bool {
	c.calls.Add(1)
	return c.Timer.AdvanceClock(d)
}

// Regression (issue 35, 6): a purgatory that keeps its reaper on a
// MockTimer does not spin: the reaper's AdvanceClock waits on the mock
// clock, which only the test moves, and Shutdown still stops it.
func TestReaperOnAMockTimerSleeps(t *testing.T) {
	t.Parallel()
	mt := &countingTimer{Timer: timer.NewMockTimer()}
	p, err := purgatory.New[string, *mockOp]("mock-reaper", purgatory.WithTimer(mt))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return mt.calls.Load() > 0 }, 10*time.Second, time.Millisecond)
	op := newOp(time.Second)
	_, err = p.TryCompleteElseWatch(op, "k")
	require.NoError(t, err)
	before := mt.calls.Load()
	time.Sleep(100 * time.Millisecond) // a spinning reaper calls it thousands of times meanwhile
	assert.LessOrEqual(t, mt.calls.Load()-before, int64(2), "the reaper waits for the mock clock")
	assert.Equal(t, 1, mt.Timer.(*timer.MockTimer).Advance(time.Second), "a test advancing the clock expires it")
	assert.True(t, op.IsExpired())
	require.NoError(t, p.Shutdown(context.Background()))
}

// blocker is an operation whose TryComplete, once armed, waits until it
// is released: a check that holds the operation's lock for as long as the
// test wants.
type blocker struct {
	optest.Op
	arm     atomic.Bool
	inside  chan struct{}
	release chan struct{}
}

func (b *blocker) TryComplete() bool {
	if b.arm.CompareAndSwap(true, false) {
		close(b.inside)
		<-b.release
	}
	return false
}

// Regression (issue 35, 7): a park of an operation that is already parked
// is refused at once with ErrAlreadyWatched, without waiting for the
// operation's lock (held here by a check) and without holding a place
// under WithMaxPending meanwhile.
func TestRefusedParkHoldsNoPlace(t *testing.T) {
	t.Parallel()
	p, err := purgatory.New[string, operation.DelayedOperation]("bounded",
		purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper(), purgatory.WithMaxPending(2))
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	x := &blocker{inside: make(chan struct{}), release: make(chan struct{})}
	x.Init(x, time.Hour)
	_, err = p.TryCompleteElseWatch(x, "x")
	require.NoError(t, err)
	x.arm.Store(true)
	checked := make(chan int)
	go func() { checked <- p.CheckAndComplete("x") }()
	<-x.inside // the check holds x's lock

	again := make(chan error, 1)
	go func() { _, err := p.TryCompleteElseWatch(x, "x"); again <- err }()
	waited := false
	select {
	case err := <-again:
		assert.ErrorIs(t, err, purgatory.ErrAlreadyWatched)
	case <-time.After(10 * time.Second):
		t.Error("a second park of a parked operation waits for its lock")
		waited = true
	}
	y := newOp(time.Hour)
	_, err = p.TryCompleteElseWatch(y, "y")
	assert.NoError(t, err, "one operation pending of two allowed")
	assert.Equal(t, 2, p.NumDelayed())
	close(x.release)
	assert.Zero(t, <-checked)
	if waited {
		assert.ErrorIs(t, <-again, purgatory.ErrAlreadyWatched)
	}
}

// story records an observer's calls and the operations' OnCompletes in
// one sequence.
type story struct {
	mu  sync.Mutex
	log []string
}

func (s *story) add(e string) {
	s.mu.Lock()
	s.log = append(s.log, e)
	s.mu.Unlock()
}

func (s *story) Parked(purgatory.Park) any { s.add("parked"); return nil }
func (s *story) Left(_ any, d purgatory.Departure) {
	s.add("left " + d.Outcome.String())
}
func (s *story) Refused(_ purgatory.Park, err error) { s.add("refused") }

func (s *story) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// storyOfASharedLockOp returns a purgatory on a MockTimer, with no reaper,
// whose observer is a story, and an operation with an hour's timeout
// under a SharedLock of its own.
func storyOfASharedLockOp(t *testing.T) (*story, *purgatory.Purgatory[string, *mockOp], *operation.SharedLock, *mockOp) {
	t.Helper()
	s := &story{}
	p, err := purgatory.New[string, *mockOp]("deferred", purgatory.WithTimer(timer.NewMockTimer()),
		purgatory.WithoutReaper(), purgatory.WithObserver(s))
	require.NoError(t, err)
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	lock := new(operation.SharedLock)
	return s, p, lock, newOp(time.Hour, operation.WithLock(lock))
}

// Regression (issue 35, 8a): a park deferred by its held SharedLock, whose
// operation a ForceComplete completes before the unlock, is told to the
// observer as parked and left early, in that order, before OnComplete:
// the call that accepted it reported it parked, and Stats counts it.
func TestDeferredParkForcedBeforeUnlockIsToldInOrder(t *testing.T) {
	t.Parallel()
	s, p, lock, op := storyOfASharedLockOp(t)
	op.OnCompleteHook = func() { s.add("OnComplete") }
	lock.Lock()
	done, err := p.TryCompleteElseWatch(op, "k")
	require.NoError(t, err)
	assert.False(t, done)
	assert.True(t, op.ForceComplete(), "completed by a goroutine that does not hold the lock")
	lock.Unlock()
	assert.Equal(t, []string{"parked", "left early", "OnComplete"}, s.lines())
	st := p.Stats()
	assert.Equal(t, uint64(1), st.CompletedEarly)
	assert.Zero(t, st.Pending)
	assert.Zero(t, st.Watched)
}

// Regression (issue 35, 8b): two parks of one SharedLock operation, one
// by the lock's holder and one deferred to it, meet in the holder's park
// between its look at the operation and its swap. One park wins; the
// observer hears of that one only, never of a park it then refused.
func TestParkRefusedForADeferredOneIsNotTold(t *testing.T) {
	t.Parallel()
	s, p, _, op := storyOfASharedLockOp(t)
	other := make(chan error, 1)
	var once sync.Once
	purgatory.SetPublishedHook(p, func(*lifecycle.Op) {
		once.Do(func() {
			// The holder's park is between its look and its swap: a
			// second park of op finds the lock held.
			go func() { _, err := p.TryCompleteElseWatch(op, "k"); other <- err }()
			select {
			case err := <-other:
				other <- err
			case <-time.After(50 * time.Millisecond):
				// It waits for the holder's park: it will see it parked.
			}
		})
	})
	_, err1 := p.TryCompleteElseWatch(op, "k") // not deferred: the lock is free
	err2 := <-other
	parked := 0
	for _, err := range []error{err1, err2} {
		if err == nil {
			parked++
		} else {
			assert.ErrorIs(t, err, purgatory.ErrAlreadyWatched)
		}
	}
	assert.Equal(t, 1, parked, "one park wins")
	assert.Equal(t, []string{"parked"}, s.lines(), "the observer hears of the winner only")
	assert.Equal(t, 1, p.NumDelayed())
}
