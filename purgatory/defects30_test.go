package purgatory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Regression (issue 30, defect 1): after Shutdown, ResetTimeout reports
// false and changes nothing: not the deadline, not Timeout, with an
// operation left pending by WithLeavePendingOnShutdown (short and long
// timeouts) and with WithoutTimer.
func TestResetTimeoutAfterShutdownChangesNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		opts    []purgatory.Option
		timeout time.Duration
	}{
		{"leave pending", []purgatory.Option{purgatory.WithLeavePendingOnShutdown()}, time.Second},
		{"leave pending, long", []purgatory.Option{purgatory.WithLeavePendingOnShutdown()}, time.Hour},
		{"without a timer", []purgatory.Option{purgatory.WithoutTimer(), purgatory.WithoutReaper(), purgatory.WithLeavePendingOnShutdown()}, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := purgatory.New[string, *mockOp]("reset-after", c.opts...)
			require.NoError(t, err)
			op := newOp(c.timeout)
			mustPark(t, p, op, "a")
			require.NoError(t, p.Shutdown(context.Background()))
			for range 3 {
				assert.False(t, p.ResetTimeout(op, 3*time.Hour), "after Shutdown")
			}
			assert.Equal(t, c.timeout, op.Timeout(), "Timeout unchanged")
			assert.False(t, op.IsCompleted())
		})
	}
}

// Regression (issue 30, defect 2): while the SharedLock of an operation is
// held, a park of it is deferred to the unlock; a second park of the same
// operation, into the same purgatory or another, is refused at once with
// ErrAlreadyWatched. Before, it was accepted, and the unlock only logged
// its refusal: the operation was never watched on the second call's keys.
func TestSecondParkOfADeferredParkIsRefused(t *testing.T) {
	t.Parallel()
	for _, into := range []string{"same", "other"} {
		t.Run(into, func(t *testing.T) {
			p, mt := newMockPurgatory(t)
			q := p
			if into == "other" {
				q, _ = newMockPurgatory(t)
			}
			var lock operation.SharedLock
			op := newOp(time.Second, operation.WithLock(&lock))
			lock.Lock()
			done, err := p.TryCompleteElseWatch(op, "a")
			require.NoError(t, err, "deferred to the unlock")
			assert.False(t, done)
			_, err = q.TryCompleteElseWatch(op, "b")
			assert.ErrorIs(t, err, purgatory.ErrAlreadyWatched, "a second park, at once")
			lock.Unlock()
			assert.Equal(t, 1, p.NumDelayed())
			assert.Equal(t, 1, p.Watched(), "watched on the first call's key only")
			if into == "other" {
				assert.Zero(t, q.NumDelayed())
			}
			op.Ready.Store(true)
			assert.Equal(t, 1, p.CheckAndComplete("a"))
			mt.Advance(time.Hour)
			assert.Equal(t, int32(1), op.Completes.Load())
		})
	}
}

// Two goroutines park one operation whose SharedLock a third holds: one
// park is accepted (deferred), the other refused, every time.
func TestConcurrentParksOfADeferredOperation(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	for round := range 200 {
		var lock operation.SharedLock
		op := newOp(time.Second, operation.WithLock(&lock))
		lock.Lock()
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for _, key := range []string{"x", "y"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := p.TryCompleteElseWatch(op, fmt.Sprint(key, round))
				errs <- err
			}()
		}
		wg.Wait()
		lock.Unlock()
		close(errs)
		var accepted, refused int
		for err := range errs {
			switch {
			case err == nil:
				accepted++
			case errors.Is(err, purgatory.ErrAlreadyWatched):
				refused++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		require.Equal(t, 1, accepted, "round %d", round)
		require.Equal(t, 1, refused, "round %d", round)
		require.True(t, op.ForceComplete())
	}
	mt.Advance(time.Hour)
	assert.Zero(t, p.NumDelayed())
	assert.Equal(t, uint64(200), p.Stats().CompletedEarly)
}

// Regression (issue 30, defect 3): ResetTimeout with a timeout of zero or
// less, or below a tick, while the operation's SharedLock is held (by code
// under the lock, or by another operation's OnComplete under it) returns;
// the expiry runs once the lock is released, on the reaper (default timer)
// or at the next Advance (MockTimer). Before, the due expiry ran inside
// the timer's Add and waited for the lock its own caller held.
func TestResetToDueUnderTheSharedLock(t *testing.T) {
	t.Parallel()
	for _, tm := range []string{"mock", "default"} {
		for _, to := range []time.Duration{0, -time.Second, 100 * time.Microsecond} {
			for _, from := range []string{"under the lock", "another's OnComplete"} {
				t.Run(fmt.Sprintf("%s/%v/%s", tm, to, from), func(t *testing.T) {
					var p *pg
					var mt *timer.MockTimer
					if tm == "mock" {
						p, mt = newMockPurgatory(t)
					} else {
						var err error
						p, err = purgatory.New[string, *mockOp]("due-reset")
						require.NoError(t, err)
						t.Cleanup(func() { assert.NoError(t, p.Shutdown(context.Background())) })
					}
					var lock operation.SharedLock
					op := newOp(time.Hour, operation.WithLock(&lock))
					mustPark(t, p, op, "a")
					reset := make(chan bool, 1)
					switch from {
					case "under the lock":
						lock.Lock()
						reset <- p.ResetTimeout(op, to)
						lock.Unlock()
					default:
						other := newOp(time.Hour, operation.WithLock(&lock))
						other.OnCompleteHook = func() { reset <- p.ResetTimeout(op, to) }
						mustPark(t, p, other, "b")
						other.Ready.Store(true)
						require.Equal(t, 1, p.CheckAndComplete("b"))
					}
					require.True(t, <-reset)
					if mt != nil {
						assert.False(t, op.IsCompleted(), "the reset ran no expiry")
						mt.Advance(0)
						mt.Advance(to) // a sub-tick timeout: its deadline
					}
					// OnExpiration is the expiry's last step.
					waitFor(t, func() bool { return op.Expiries.Load() == 1 })
					assert.True(t, op.IsExpired())
					assert.Equal(t, int32(1), op.Completes.Load())
				})
			}
		}
	}
}

// Regression (issue 30, defect 4): CompleteForKey calls on different keys
// of the same operations, at once: each operation is counted by exactly
// the call whose cause it reports.
func TestConcurrentCompleteForKeyAgree(t *testing.T) {
	t.Parallel()
	const keys, n = 4, 128
	for round := range 20 {
		p, _ := newMockPurgatory(t)
		ops := make([]*mockOp, n)
		for i := range ops {
			ops[i] = newOp(time.Hour)
			mustPark(t, p, ops[i], "k0", "k1", "k2", "k3")
		}
		causes := make([]error, keys)
		counted := make([]int, keys)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for k := range keys {
			causes[k] = fmt.Errorf("cause %d", k)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				counted[k] = p.CompleteForKey(fmt.Sprint("k", k), causes[k])
			}()
		}
		close(start)
		wg.Wait()
		reported := make([]int, keys)
		for _, op := range ops {
			require.True(t, op.IsCompleted())
			for k := range keys {
				if errors.Is(op.Cause(), causes[k]) {
					reported[k]++
				}
			}
		}
		require.Equal(t, reported, counted, "round %d: calls' counts against causes reported", round)
		require.Equal(t, uint64(n), p.Stats().CompletedForKey)
	}
}

// Regression (issue 30, defect 5): operations parked by other goroutines
// (handlers under test) are in the timer once NumDelayed counts them, with
// deadlines fixed at their park: the Advance by the timeout that follows
// expires every one of them. Before, NumDelayed counted an operation
// before its timeout reached the timer, and an Advance in between missed
// it; it then expired a whole timeout late.
func TestParkedByOthersExpireInTheAdvance(t *testing.T) {
	t.Parallel()
	const n = 1000
	for _, timeout := range []time.Duration{500 * time.Millisecond, time.Hour} {
		t.Run(timeout.String(), func(t *testing.T) {
			p, mt := newMockPurgatory(t)
			ops := make([]*mockOp, n)
			var wg sync.WaitGroup
			for i := range ops {
				ops[i] = newOp(timeout)
				wg.Add(1)
				go func() {
					defer wg.Done()
					done, err := p.TryCompleteElseWatch(ops[i], fmt.Sprint("k", i%10))
					assert.NoError(t, err)
					assert.False(t, done)
				}()
			}
			waitFor(t, func() bool { return p.NumDelayed() == n })
			assert.Equal(t, n, mt.Advance(timeout), "every one expires in this Advance")
			for i, op := range ops {
				require.True(t, op.IsExpired(), "operation %d", i)
			}
			wg.Wait()
			assert.Zero(t, p.NumDelayed())
		})
	}
}
