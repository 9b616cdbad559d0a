package purgatory_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// The seam tests run one competitor exactly between two steps of
// TryCompleteElseWatch (park, first TryComplete, watch each key, last
// TryComplete, unlock, add the timeout), for every pair of step and
// competitor, and then check the outcome: callbacks exactly once, every
// count exact, nothing left in the timer, and the operation unreachable.
//
// At the first four steps TryCompleteElseWatch holds the operation's lock.
// A competitor that needs it (expiry, CancelForKey, Shutdown, a context's
// AfterFunc) runs on a goroutine of its own, and the hook waits until it is
// blocked on that lock (or done), so it acts at the first moment the design
// allows. Lock-free competitors (ForceComplete, CheckAndComplete, which
// leaves a note for the lock's holder) act inside the step itself.

type seamCompetitor struct {
	name string
	// act runs the competitor. It returns at once for competitors that
	// finish on another goroutine.
	act func(s *seam)
	// outcome is how the operation ends when the competitor acts at step.
	outcome func(step purgatory.Step) string
}

type seam struct {
	t      *testing.T
	p      *pg
	op     *mockOp
	cancel context.CancelFunc
	got    []*mockOp // what CancelForKey returned
}

var seamKeys = []string{"a", "b"}

var competitors = []seamCompetitor{
	{
		name:    "ForceComplete",
		act:     func(s *seam) { s.op.ForceComplete() },
		outcome: func(purgatory.Step) string { return "early" },
	},
	{
		name: "CheckAndComplete",
		act: func(s *seam) {
			s.op.Ready.Store(true)
			s.p.CheckAndComplete(seamKeys[0]) // watched first
		},
		outcome: func(purgatory.Step) string { return "early" },
	},
	{
		name: "expiry",
		act: func(s *seam) {
			// An expiry already handed over, as a Timer of the user's
			// own runs it: the timer's entry need not say it fired.
			lifecycle.Expire(lifecycle.Of(s.op), lifecycle.Expired)
		},
		outcome: func(purgatory.Step) string { return "expired" },
	},
	{
		name: "CancelForKey",
		act:  func(s *seam) { s.got = s.p.CancelForKey(seamKeys[0]) },
		outcome: func(step purgatory.Step) string {
			if order(step) < purgatory.StepBetweenKeys {
				return "pending" // not watched on the key yet: nothing to cancel
			}
			return "cancelled"
		},
	},
	{
		name:    "Shutdown",
		act:     func(s *seam) { require.NoError(s.t, s.p.Shutdown(context.Background())) },
		outcome: func(purgatory.Step) string { return "shutdown" },
	},
	{
		name:    "context",
		act:     func(s *seam) { s.cancel() },
		outcome: func(purgatory.Step) string { return "context" },
	},
	{
		name: "CompleteForKey",
		act:  func(s *seam) { s.p.CompleteForKey(seamKeys[0], errMoved) },
		outcome: func(step purgatory.Step) string {
			if order(step) < purgatory.StepBetweenKeys {
				return "pending" // not watched on the key yet: nothing to complete
			}
			return "for_key"
		},
	},
	{
		// A reset takes no lock of the operation's: it acts inside the
		// step, and the operation stays parked, its timeout in the timer.
		name: "ResetTimeout",
		act: func(s *seam) {
			assert.True(s.t, s.p.ResetTimeout(s.op, time.Minute), "parked: the reset applies")
		},
		outcome: func(purgatory.Step) string { return "pending" },
	},
}

// lockHeld reports whether TryCompleteElseWatch holds the operation's lock
// at step: at every one, the timer's Add (stepInAdd) included.
func lockHeld(purgatory.Step) bool { return true }

// seamTimeout is the seam tests' operations' timeout; longTimeout a second
// one, of a coarser level of the wheels.
const (
	seamTimeout = 500 * time.Millisecond
	longTimeout = time.Second
)

// stepInAdd is one more point, inside the timer's Add, before the entry is
// linked: a wrapping Timer reaches it. The timeout is added after the
// first TryComplete and before the watches (its slot is their Handle).
const stepInAdd = purgatory.Step(200)

// order places stepInAdd among the steps: right after StepTried.
func order(s purgatory.Step) purgatory.Step {
	if s == stepInAdd {
		return purgatory.StepTried
	}
	return s
}

// addHookTimer runs hook at the start of every Add, then adds to the
// MockTimer it wraps.
type addHookTimer struct {
	*timer.MockTimer
	hook func(purgatory.Step)
}

func (a *addHookTimer) Add(task timer.Task) error {
	a.hook(stepInAdd)
	return a.MockTimer.Add(task)
}

// TestSeams runs every competitor at every step three times: with the
// MockTimer wrapped (Add has a step inside it), with the MockTimer itself,
// and with a longer timeout.
func TestSeams(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"wrapped/", "direct/", "long/"} {
		wrapped := mode == "wrapped/"
		timeout := seamTimeout
		if mode == "long/" {
			timeout = longTimeout
		}
		steps := purgatory.Steps
		if wrapped {
			steps = append(steps, stepInAdd)
		}
		for _, step := range steps {
			for _, c := range competitors {
				name := "in-add"
				if step != stepInAdd {
					name = step.String()
				}
				t.Run(mode+name+"/"+c.name, func(t *testing.T) {
					runSeam(t, step, c, wrapped, timeout)
				})
			}
		}
	}
}

func runSeam(t *testing.T, step purgatory.Step, c seamCompetitor, wrapped bool, timeout time.Duration) {
	mt := timer.NewMockTimer()
	wrap := &addHookTimer{MockTimer: mt, hook: func(purgatory.Step) {}}
	var tm timer.Timer = mt
	if wrapped {
		tm = wrap
	}
	y := new(tally)
	p, err := purgatory.New[string, *mockOp]("seams", purgatory.WithTimer(tm), purgatory.WithoutReaper(),
		purgatory.WithObserver(y))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Shutdown(context.Background())) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &seam{t: t, p: p, op: newOp(timeout, operation.WithContext(ctx)), cancel: cancel}
	lo := lifecycle.Of(s.op)

	// reached is signalled when the competitor has finished, or is blocked
	// on the operation's lock.
	reached := make(chan struct{}, 2)
	hook := func(o *lifecycle.Op) {
		if o == lo {
			reached <- struct{}{}
		}
	}
	purgatory.SetContendedHook(p, hook)

	acted := false
	finished := make(chan struct{}) // closed when the competitor's goroutine returns
	stepHook := func(at purgatory.Step) {
		if at != step || acted {
			return
		}
		acted = true
		if !lockHeld(step) {
			close(finished)
			c.act(s)
			if c.name == "context" { // completes on the AfterFunc's goroutine
				waitFor(t, func() bool { return s.op.Completes.Load() == 1 })
			}
			return
		}
		go func() {
			defer close(finished)
			c.act(s)
			if c.name != "context" {
				reached <- struct{}{}
			}
		}()
		select {
		case <-reached:
		case <-time.After(30 * time.Second):
			t.Error("the competitor neither finished nor reached the lock")
		}
	}
	restore := purgatory.SetStepHook(p, stepHook)
	wrap.hook = stepHook
	done, err := p.TryCompleteElseWatch(s.op, seamKeys...)
	restore()
	require.NoError(t, err)
	require.True(t, acted, "the hook never ran at %v", step)

	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("the competitor did not return")
	}
	want := c.outcome(step)
	// A competitor that waited for the lock acts once it is released: wait
	// for its effect before judging.
	waitFor(t, func() bool {
		switch want {
		case "pending":
			return true
		case "cancelled":
			return s.op.IsCancelled()
		default:
			return s.op.Completes.Load() == 1
		}
	})
	if want == "pending" {
		// Nothing raced: the operation is parked as usual. Check that, then
		// end it with Shutdown.
		st := p.Stats()
		assert.Equal(t, 1, st.Pending)
		assert.Equal(t, len(seamKeys)-1+1, st.Watched, "watched on both keys")
		assert.Equal(t, 1, mt.Size(), "its timeout in the timer")
		require.NoError(t, p.Shutdown(context.Background()))
		want = "shutdown"
	}
	if want == "cancelled" {
		assert.Equal(t, []*mockOp{s.op}, s.got)
	}

	// The call reports true only when its own last TryComplete completed
	// the operation: a check leaves a note while the lock is held, and the
	// last TryComplete, which sees Ready, does it.
	wantDone := c.name == "CheckAndComplete" && order(step) <= purgatory.StepWatched
	assert.Equal(t, wantDone, done, "TryCompleteElseWatch's result")

	var stats purgatory.Stats
	completes, expiries := int32(1), int32(0)
	var cause error
	switch want {
	case "early":
		stats.CompletedEarly = 1
	case "expired":
		stats.Expired, expiries, cause = 1, 1, operation.ErrExpired
	case "shutdown":
		stats.Shutdown, expiries, cause = 1, 1, purgatory.ErrShutdown
	case "context":
		stats.ContextDone, cause = 1, context.Canceled
	case "cancelled":
		stats.Cancelled, completes = 1, 0
	case "for_key":
		stats.CompletedForKey, cause = 1, errMoved
	}
	got := p.Stats()
	got.Purged = 0
	checkTally(t, got, y, 0)
	// Directly on the MockTimer, whose clock never moved, a time in
	// purgatory that is not zero was measured from a deadline read before
	// the park wrote it (which is a minute off). Wrapped, the purgatory
	// times on the system clock: the test's own duration at most.
	if wrapped {
		assert.Less(t, time.Duration(y.maxTime.Load()), 30*time.Second, "time in purgatory")
	} else {
		assert.Zero(t, y.maxTime.Load(), "time in purgatory")
	}
	assert.Equal(t, stats, got, "Stats")
	assert.Equal(t, 0, p.NumDelayed())
	assert.Equal(t, 0, p.Watched())
	assert.Equal(t, completes, s.op.Completes.Load(), "OnComplete")
	assert.Equal(t, expiries, s.op.Expiries.Load(), "OnExpiration")
	assert.Equal(t, cause, s.op.Cause())
	assert.Equal(t, 0, mt.Size(), "left in the timer")

	// Nothing the purgatory, its timer or the context holds still reaches
	// the operation.
	wp := weak.Make(s.op)
	s.op, s.got = nil, nil
	lo = nil
	require.Eventually(t, func() bool {
		runtime.GC()
		return wp.Value() == nil
	}, 30*time.Second, time.Millisecond, "the operation is still reachable")
	runtime.KeepAlive(p)
	runtime.KeepAlive(ctx)
}

// CancelForKey removes the key's list, then cancels each operation it held.
// A competitor that completes an operation between the two wins: the
// operation is not returned, and is counted once, as it completed.
func TestCancelForKeySeam(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		act  func(p *pg, op *mockOp, cancel context.CancelFunc)
		want func(st purgatory.Stats) uint64
	}{
		{"ForceComplete", func(_ *pg, op *mockOp, _ context.CancelFunc) { op.ForceComplete() },
			func(st purgatory.Stats) uint64 { return st.CompletedEarly }},
		{"CheckAndComplete", func(p *pg, op *mockOp, _ context.CancelFunc) {
			op.Ready.Store(true)
			p.CheckAndComplete("b") // its other key
		}, func(st purgatory.Stats) uint64 { return st.CompletedEarly }},
		{"expiry", func(_ *pg, op *mockOp, _ context.CancelFunc) { lifecycle.Task(lifecycle.Of(op)).Run() },
			func(st purgatory.Stats) uint64 { return st.Expired }},
		{"context", func(_ *pg, op *mockOp, cancel context.CancelFunc) {
			cancel()
			waitFor(t, func() bool { return op.Completes.Load() == 1 })
		}, func(st purgatory.Stats) uint64 { return st.ContextDone }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, mt := newMockPurgatory(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			op := newOp(seamTimeout, operation.WithContext(ctx))
			mustPark(t, p, op, "a", "b")
			defer purgatory.SetStepHook(p, func(s purgatory.Step) {
				if s == purgatory.StepCancelRemoved {
					c.act(p, op, cancel)
				}
			})()
			assert.Empty(t, p.CancelForKey("a"), "completed first: not handed back")
			assert.Equal(t, int32(1), op.Completes.Load())
			assert.False(t, op.IsCancelled())
			st := p.Stats()
			assert.Equal(t, uint64(1), c.want(st))
			assert.Equal(t, uint64(0), st.Cancelled)
			assert.Equal(t, 0, st.Pending)
			assert.Equal(t, 0, st.Watched)
			assert.Equal(t, 0, mt.Size())
		})
	}
}
