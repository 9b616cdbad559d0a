package purgatory_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Regression (issue 43, 0): a purgatory given a Reaper around a MockTimer
// shuts down whatever the reaper's goroutine is doing when Shutdown comes:
// Close's wake-up used to be lost when it came before the goroutine
// entered its wait on the mock clock, which nothing moves any more.
func TestShutdownOfAReaperOnAMockTimer(t *testing.T) {
	t.Parallel()
	for range 100 {
		func() {
			mt := timer.NewMockTimer()
			p, err := purgatory.New[string, *mockOp]("reaper-mock",
				purgatory.WithTimer(timer.NewReaper("r", mt)), purgatory.WithoutReaper())
			require.NoError(t, err)
			done := make(chan error, 1)
			defer func() {
				go func() { done <- p.Shutdown(context.Background()) }()
				select {
				case err := <-done:
					assert.NoError(t, err)
				case <-time.After(time.Minute):
					t.Fatal("Shutdown did not return")
				}
			}()
			op := newOp(time.Second)
			_, err = p.TryCompleteElseWatch(op, "k")
			require.NoError(t, err)
			mt.Advance(time.Second + time.Millisecond)
			assert.True(t, op.IsExpired())
		}()
	}
}

// Regression (issue 43, 0): Shutdown stops a purgatory's reaper on a
// MockTimer, its own or a Reaper it was given, whenever it comes: after a
// random number of yields and advances of the clock, with an operation
// parked or not. None is left asleep on its mock clock (goleak, in
// TestMain, checks that the goroutines are gone).
func TestShutdownStormOfReapersOnMockTimers(t *testing.T) {
	t.Parallel()
	n := 1000
	if *full {
		n = 10_000
	}
	var left atomic.Int64
	left.Store(int64(n))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		rng := rand.New(rand.NewPCG(43, 0))
		for i := range n {
			mt := timer.NewMockTimer()
			opts := []purgatory.Option{purgatory.WithTimer(mt)}
			if i%2 == 1 {
				opts = []purgatory.Option{purgatory.WithTimer(timer.NewReaper("r", mt)), purgatory.WithoutReaper()}
			}
			p, err := purgatory.New[string, *mockOp]("storm", opts...)
			if err != nil {
				panic(err)
			}
			if rng.IntN(2) == 0 {
				_, _ = p.TryCompleteElseWatch(newOp(time.Duration(rng.IntN(400))*time.Millisecond), "k")
			}
			for range rng.IntN(8) {
				if rng.IntN(3) == 0 {
					mt.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				}
				runtime.Gosched()
			}
			_ = p.Shutdown(context.Background())
			left.Add(-1)
		}
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Minute): // a generous bound on a hang, not a timing
		t.Fatalf("%d of %d Shutdowns never returned", left.Load(), n)
	}
}

// leftTimes is an Observer that notes each operation's outcome and its
// time in purgatory.
type leftTimes struct {
	mu   sync.Mutex
	time map[operation.DelayedOperation]time.Duration
	how  map[operation.DelayedOperation]purgatory.Outcome
}

func (l *leftTimes) Parked(p purgatory.Park) any { return p.Operation }
func (l *leftTimes) Left(state any, d purgatory.Departure) {
	l.mu.Lock()
	defer l.mu.Unlock()
	op := state.(operation.DelayedOperation)
	l.time[op], l.how[op] = d.Time, d.Outcome
}
func (l *leftTimes) Refused(purgatory.Park, error) {}

// Issue 43, 1: on a MockTimer each operation expires with the clock at its
// own deadline, however far one Advance moves it, so an observer's time
// in purgatory is exactly each one's timeout, and its OnComplete reads
// its deadline; a timeout in a coarse bucket of the wheels too.
func TestExpiryOnAMockTimerAtEachDeadline(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	obs := &leftTimes{time: map[operation.DelayedOperation]time.Duration{}, how: map[operation.DelayedOperation]purgatory.Outcome{}}
	p, err := purgatory.New[string, *mockOp]("deadlines",
		purgatory.WithTimer(mt), purgatory.WithoutReaper(), purgatory.WithObserver(obs))
	require.NoError(t, err)
	defer p.Shutdown(context.Background())

	mt.Advance(time.Second) // parks at 1 s
	timeouts := []time.Duration{3 * time.Millisecond, 7 * time.Millisecond, 10 * time.Millisecond, time.Hour + 3}
	ops := make([]*mockOp, len(timeouts))
	ranAt := make([]time.Duration, len(timeouts))
	for i, d := range timeouts {
		op := newOp(d)
		op.OnCompleteHook = func() { ranAt[i] = mt.Now() }
		ops[i] = op
		_, err := p.TryCompleteElseWatch(op, "k")
		require.NoError(t, err)
	}
	assert.Equal(t, len(ops), mt.Advance(2*time.Hour))
	for i, op := range ops {
		assert.True(t, op.IsExpired())
		assert.Equal(t, purgatory.OutcomeExpired, obs.how[op])
		assert.Equal(t, timeouts[i], obs.time[op], "time in purgatory of the operation with timeout %v", timeouts[i])
		assert.Equal(t, time.Second+timeouts[i], ranAt[i], "OnComplete runs with the clock at the deadline")
	}
	assert.Equal(t, time.Second+2*time.Hour, mt.Now())
}

// at is a timer task that calls f when it runs: a way to act in the middle
// of a MockTimer's Advance, between two of its steps.
type at struct {
	timer.TaskBase
	f func()
}

func (a *at) Run() { a.f() }

// Issue 43, 4: a ResetTimeout in the middle of an Advance sees the clock
// where the Advance has got to, never past the deadline of an operation
// whose expiry has not fired. Before, the first step moved the clock to
// the end of the advance, and an operation whose timeout sat in a coarse
// bucket was still pending there: a reset then reported true, measured its
// new deadline from the end, and that Advance did not expire it. Now one
// made at 30 minutes moves an operation due at 1 hour to 1.5 hours, which
// the same Advance reaches and expires it at; one made after an
// operation's deadline finds it expired and reports false.
func TestResetTimeoutDuringAnAdvance(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	obs := &leftTimes{time: map[operation.DelayedOperation]time.Duration{}, how: map[operation.DelayedOperation]purgatory.Outcome{}}
	p, err := purgatory.New[string, *mockOp]("reset-mid-advance",
		purgatory.WithTimer(mt), purgatory.WithoutReaper(), purgatory.WithObserver(obs))
	require.NoError(t, err)
	defer p.Shutdown(context.Background())

	moved, late := newOp(time.Hour), newOp(time.Hour)
	var movedAt time.Duration
	moved.OnCompleteHook = func() { movedAt = mt.Now() }
	for _, op := range []*mockOp{moved, late} {
		_, err := p.TryCompleteElseWatch(op, "k")
		require.NoError(t, err)
	}
	var early, after bool
	mid := &at{f: func() { early = p.ResetTimeout(moved, time.Hour) }}
	mid.SetDelay(30 * time.Minute)
	require.NoError(t, mt.Add(mid))
	end := &at{f: func() { after = p.ResetTimeout(late, time.Hour) }}
	end.SetDelay(time.Hour + time.Nanosecond)
	require.NoError(t, mt.Add(end))

	assert.Equal(t, 4, mt.Advance(2*time.Hour), "both tasks run, and both operations expire")
	assert.True(t, early, "at 30 minutes the operation was pending")
	assert.False(t, after, "a nanosecond after its deadline the operation had expired")
	assert.True(t, moved.IsExpired())
	assert.True(t, late.IsExpired())
	assert.Equal(t, 90*time.Minute, movedAt, "it expired at its new deadline")
	assert.Equal(t, 90*time.Minute, obs.time[moved])
	assert.Equal(t, time.Hour, obs.time[late])
}

// Issue 43, 4: WithMaxPending bounds places, not NumDelayed. A park
// deferred by its held SharedLock holds a place from the call that
// accepts it, but counts in NumDelayed only once the unlock has finished
// it: meanwhile a park is refused with ErrFull while NumDelayed reports 0.
func TestErrFullWithNothingDelayed(t *testing.T) {
	t.Parallel()
	p, err := purgatory.New[string, *mockOp]("places",
		purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper(), purgatory.WithMaxPending(1))
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	var group operation.SharedLock
	deferred := newOp(time.Second, operation.WithLock(&group))
	group.Lock()
	done, err := p.TryCompleteElseWatch(deferred, "k")
	require.NoError(t, err)
	assert.False(t, done)
	assert.Zero(t, p.NumDelayed(), "the deferred park waits for the unlock")
	_, err = p.TryCompleteElseWatch(newOp(time.Second), "k")
	assert.ErrorIs(t, err, purgatory.ErrFull, "the deferred park holds the one place")
	group.Unlock()
	assert.Equal(t, 1, p.NumDelayed())
	assert.Equal(t, uint64(1), p.Stats().Full)
}
