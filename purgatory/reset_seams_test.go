package purgatory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// userTimer is a Timer of the user's own, made of a MockTimer: the
// purgatory cannot find the engine behind it (it embeds the interface
// only), so a ResetTimeout there takes two steps, as with any Timer of a
// user's: it moves the deadline, then adds the entry again.
type userTimer struct{ timer.Timer }

// newUserTimerPurgatory is newMockPurgatory on a userTimer.
func newUserTimerPurgatory(t *testing.T, opts ...purgatory.Option) (*pg, *timer.MockTimer) {
	t.Helper()
	mt := timer.NewMockTimer()
	p, _ := newMockPurgatory(t, append([]purgatory.Option{purgatory.WithTimer(userTimer{mt})}, opts...)...)
	return p, mt
}

// On a timer of package timer a reset is one step: by the time anything
// else can act (StepReset), the old deadline has left the timer and the
// new one, measured from the reset's reading of the clock, is filed. An
// Advance past the old deadline then expires nothing; the operation
// expires at the new one.
func TestResetTimeoutIsOneStep(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{seamTimeout, longTimeout} {
		t.Run(timeout.String(), func(t *testing.T) {
			p, mt := newMockPurgatory(t)
			op := newOp(timeout)
			mustPark(t, p, op, "a", "b")
			mt.Advance(seamTimeout / 2)
			restore := purgatory.SetStepHook(p, func(s purgatory.Step) {
				if s == purgatory.StepReset {
					assert.Zero(t, mt.Advance(2*timeout), "the old deadline has left")
				}
			})
			require.True(t, p.ResetTimeout(op, 3*timeout))
			restore()
			assert.False(t, op.IsCompleted())
			assert.Equal(t, 1, mt.Size())
			mt.Advance(timeout - time.Millisecond)
			assert.False(t, op.IsCompleted(), "expired early")
			mt.Advance(2 * time.Millisecond)
			assert.True(t, op.IsExpired())
			assert.Zero(t, mt.Size())
		})
	}
}

// On a Timer of the user's own, ResetTimeout moves the deadline, then adds
// the entry again. Each competitor acts exactly between the two; the
// reset never makes an operation expire early, or twice, or stay in the
// timer once it has left.
func TestResetTimeoutSeam(t *testing.T) {
	t.Parallel()
	type result struct {
		reset bool   // what ResetTimeout reports
		end   string // how the operation ends
	}
	for _, c := range []struct {
		name string
		act  func(t *testing.T, p *pg, mt *timer.MockTimer, op *mockOp, cancel context.CancelFunc)
		want result
	}{
		// The old deadline passes while the entry is out of the timer:
		// nothing expires, and the new deadline holds, measured from the
		// reset's Add, which comes after this Advance.
		{"expiry", func(_ *testing.T, _ *pg, mt *timer.MockTimer, _ *mockOp, _ context.CancelFunc) {
			mt.Advance(2 * seamTimeout)
		}, result{true, "expired at the new deadline"}},
		{"ForceComplete", func(_ *testing.T, _ *pg, _ *timer.MockTimer, op *mockOp, _ context.CancelFunc) {
			op.ForceComplete()
		}, result{true, "early"}},
		{"CheckAndComplete", func(_ *testing.T, p *pg, _ *timer.MockTimer, op *mockOp, _ context.CancelFunc) {
			op.Ready.Store(true)
			p.CheckAndComplete("b")
		}, result{true, "early"}},
		{"context", func(t *testing.T, _ *pg, _ *timer.MockTimer, op *mockOp, cancel context.CancelFunc) {
			cancel()
			waitFor(t, func() bool { return op.Completes.Load() == 1 })
		}, result{true, "context"}},
		{"CancelForKey", func(t *testing.T, p *pg, _ *timer.MockTimer, op *mockOp, _ context.CancelFunc) {
			assert.Equal(t, []*mockOp{op}, p.CancelForKey("a"))
		}, result{true, "cancelled"}},
		{"CompleteForKey", func(t *testing.T, p *pg, _ *timer.MockTimer, _ *mockOp, _ context.CancelFunc) {
			assert.Equal(t, 1, p.CompleteForKey("a", errMoved))
		}, result{true, "for_key"}},
		// The timer is closed before the Add: the reset fails, and the
		// operation ends as Shutdown ends every pending one.
		{"Shutdown", func(t *testing.T, p *pg, _ *timer.MockTimer, _ *mockOp, _ context.CancelFunc) {
			require.NoError(t, p.Shutdown(context.Background()))
		}, result{false, "shutdown"}},
	} {
		for _, timeout := range []time.Duration{seamTimeout, longTimeout} {
			t.Run(c.name+"/"+timeout.String(), func(t *testing.T) {
				p, mt := newUserTimerPurgatory(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				op := newOp(timeout, operation.WithContext(ctx))
				mustPark(t, p, op, "a", "b")
				mt.Advance(seamTimeout / 2)
				acted := false
				restore := purgatory.SetStepHook(p, func(s purgatory.Step) {
					if s == purgatory.StepReset && !acted {
						acted = true
						c.act(t, p, mt, op, cancel)
					}
				})
				got := p.ResetTimeout(op, 3*seamTimeout)
				restore()
				require.True(t, acted)
				assert.Equal(t, c.want.reset, got, "ResetTimeout's result")

				st := p.Stats()
				switch c.want.end {
				case "expired at the new deadline":
					assert.False(t, op.IsCompleted(), "expired at a deadline it no longer had")
					assert.Equal(t, 1, mt.Size())
					mt.Advance(3*seamTimeout - time.Millisecond)
					assert.False(t, op.IsCompleted(), "expired early")
					mt.Advance(2 * time.Millisecond)
					assert.True(t, op.IsExpired())
					st = p.Stats()
					assert.Equal(t, uint64(1), st.Expired)
				case "early":
					assert.Equal(t, uint64(1), st.CompletedEarly)
				case "context":
					assert.Equal(t, uint64(1), st.ContextDone)
				case "cancelled":
					assert.Equal(t, uint64(1), st.Cancelled)
				case "for_key":
					assert.Equal(t, uint64(1), st.CompletedForKey)
					assert.ErrorIs(t, op.Cause(), errMoved)
				case "shutdown":
					assert.Equal(t, uint64(1), st.Shutdown)
				}
				completes := int32(1)
				if c.want.end == "cancelled" {
					completes = 0
				}
				assert.Equal(t, completes, op.Completes.Load(), "OnComplete")
				assert.Equal(t, 0, st.Pending)
				assert.Equal(t, 0, st.Watched)
				assert.Equal(t, 0, mt.Size(), "left in the timer")
				// A later deadline passes: nothing runs twice.
				mt.Advance(time.Hour)
				assert.Equal(t, completes, op.Completes.Load(), "OnComplete, after every deadline")
				assert.LessOrEqual(t, op.Expiries.Load(), int32(1))
			})
		}
	}
}

// signalLock is a user lock (operation.WithLock) that reports when a
// goroutine is about to wait for it. It has no TryLock, so the lifecycle
// waits for it everywhere.
type signalLock struct {
	mu      sync.Mutex
	waiting chan struct{}
}

func (l *signalLock) Lock() {
	if !l.mu.TryLock() {
		l.waiting <- struct{}{}
		l.mu.Lock()
	}
}

func (l *signalLock) Unlock() { l.mu.Unlock() }

// The timer fires the entry at its old deadline, and its expiry waits for
// the operation's lock; a reset comes then. On a timer of package timer
// the fired entry has decided (the expiry is under way): the reset
// reports false and the operation expires once, at its old deadline. On
// a Timer of the user's own, which cannot tell which Add a run is for,
// the reset wins and the stale expiry does nothing: the operation expires
// once, at its new deadline.
func TestResetTimeoutAfterTheFire(t *testing.T) {
	t.Parallel()
	for _, user := range []bool{false, true} {
		t.Run(map[bool]string{false: "package timer", true: "user timer"}[user], func(t *testing.T) {
			p, mt := newMockPurgatory(t)
			if user {
				p, mt = newUserTimerPurgatory(t)
			}
			lock := &signalLock{waiting: make(chan struct{}, 1)}
			op := newOp(seamTimeout, operation.WithLock(lock))
			mustPark(t, p, op, "a")

			lock.Lock()
			expired := make(chan int)
			go func() { expired <- mt.Advance(seamTimeout) }()
			<-lock.waiting // the expiry has fired the entry, and waits for the lock
			reset := p.ResetTimeout(op, seamTimeout)
			lock.Unlock()
			<-expired
			if !user {
				assert.False(t, reset, "the fired entry decides")
				assert.True(t, op.IsExpired(), "at its old deadline")
				assert.Equal(t, seamTimeout, op.Timeout(), "a reset that lost moved the timeout")
			} else {
				assert.True(t, reset, "nothing has completed the operation")
				assert.False(t, op.IsCompleted(), "the stale expiry completed it")
				assert.Equal(t, 1, mt.Size())
				mt.Advance(seamTimeout - time.Millisecond) // its new deadline, less a tick
				assert.False(t, op.IsCompleted(), "expired early")
				mt.Advance(time.Millisecond)
				assert.True(t, op.IsExpired())
			}
			assert.Equal(t, int32(1), op.Expiries.Load())
			assert.Equal(t, uint64(1), p.Stats().Expired)
		})
	}
}

// Regression (issue 30, defect 9): the expiry has found the entry fired
// and the operation pending, and has not yet made its completing swap,
// when a reset comes, alone or with a completion that takes no lock
// (ForceComplete, CompleteForKey) before or after it. Whatever the order,
// ResetTimeout's answer agrees with what happens: false only if the
// operation had completed when it returned, and true only if the old
// deadline did not expire it. Before, the expiry claimed the entry first:
// the reset reported false while the operation was pending, and a
// CompleteForKey then completed it, which never expired.
func TestResetTimeoutAgreesWithTheExpiry(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		before  func(p *pg, op *mockOp) // acts before the reset
		after   func(p *pg, op *mockOp) // acts after it
		wantEnd string
	}{
		{"reset alone", nil, nil, "expired at the new deadline"},
		{"ForceComplete after", nil, func(_ *pg, op *mockOp) { op.ForceComplete() }, "early"},
		{"CompleteForKey after", nil, func(p *pg, _ *mockOp) { p.CompleteForKey("a", errMoved) }, "for_key"},
		{"ForceComplete before", func(_ *pg, op *mockOp) { op.ForceComplete() }, nil, "early"},
		{"CompleteForKey before", func(p *pg, _ *mockOp) { p.CompleteForKey("a", errMoved) }, nil, "for_key"},
	} {
		for _, user := range []bool{false, true} {
			t.Run(c.name+map[bool]string{false: "/package timer", true: "/user timer"}[user], func(t *testing.T) {
				p, mt := newMockPurgatory(t)
				if user {
					p, mt = newUserTimerPurgatory(t)
				}
				op := newOp(seamTimeout)
				var reset, completedAtReset []bool
				purgatory.SetClaimedHook(p, func(o *lifecycle.Op) {
					if o != lifecycle.Of(op) || len(reset) > 0 {
						return
					}
					if c.before != nil {
						c.before(p, op)
					}
					reset = append(reset, p.ResetTimeout(op, time.Hour))
					completedAtReset = append(completedAtReset, op.IsCompleted())
					if c.after != nil {
						c.after(p, op)
					}
				})
				mustPark(t, p, op, "a")
				mt.Advance(seamTimeout)
				require.Len(t, reset, 1, "the expiry reached its swap once")
				if !user {
					// The entry fired: the reset loses, and the operation
					// ends as it would have without it.
					assert.False(t, reset[0], "a reset after the fire")
					assert.True(t, op.IsCompleted())
					assert.Equal(t, seamTimeout, op.Timeout())
					if c.wantEnd == "expired at the new deadline" {
						assert.True(t, op.IsExpired(), "the old deadline expires it")
					}
					mt.Advance(2 * time.Hour)
					assert.Equal(t, int32(1), op.Completes.Load())
					assert.Equal(t, 0, mt.Size())
					return
				}
				if !reset[0] {
					assert.True(t, completedAtReset[0], "a reset that reports false finds the operation completed")
				}
				switch c.wantEnd {
				case "expired at the new deadline":
					assert.True(t, reset[0])
					assert.False(t, op.IsCompleted(), "the old deadline expired it after a reset that won")
					assert.Equal(t, time.Hour, op.Timeout())
					mt.Advance(time.Hour - time.Millisecond)
					assert.False(t, op.IsCompleted(), "expired early")
					mt.Advance(time.Millisecond)
					assert.True(t, op.IsExpired())
				case "early":
					assert.True(t, op.IsCompleted())
					assert.False(t, op.IsExpired())
					assert.Equal(t, uint64(1), p.Stats().CompletedEarly)
				case "for_key":
					assert.ErrorIs(t, op.Cause(), errMoved)
					assert.Equal(t, uint64(1), p.Stats().CompletedForKey)
				}
				if !reset[0] {
					assert.Equal(t, seamTimeout, op.Timeout(), "a reset that lost moved the timeout")
				}
				mt.Advance(2 * time.Hour)
				assert.Equal(t, int32(1), op.Completes.Load())
				assert.Equal(t, 0, mt.Size())
			})
		}
	}
}

// A reset between any two steps of the operation's own park (another
// goroutine that learnt of it early) is not undone by the rest of the
// park: the operation expires at the reset's deadline, for a timeout
// added at park and for one held back.
func TestResetTimeoutDuringPark(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{seamTimeout, longTimeout} {
		for _, step := range purgatory.Steps {
			for _, to := range []time.Duration{timeout / 2, 3 * timeout} {
				t.Run(timeout.String()+"/"+step.String()+"/to-"+to.String(), func(t *testing.T) {
					p, mt := newMockPurgatory(t)
					op := newOp(timeout)
					acted := false
					restore := purgatory.SetStepHook(p, func(s purgatory.Step) {
						if s == step && !acted {
							acted = true
							assert.True(t, p.ResetTimeout(op, to))
						}
					})
					mustPark(t, p, op, "a", "b")
					restore()
					require.True(t, acted)
					assert.Equal(t, to, op.Timeout())
					mt.Advance(to - time.Millisecond)
					assert.False(t, op.IsCompleted(), "expired early")
					mt.Advance(time.Millisecond)
					assert.True(t, op.IsExpired(), "not expired at the reset's deadline")
					assert.Equal(t, int32(1), op.Expiries.Load())
					mt.Advance(4 * timeout)
					assert.Equal(t, int32(1), op.Completes.Load())
					assert.Equal(t, 0, mt.Size())
				})
			}
		}
	}
}
