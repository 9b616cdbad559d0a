package purgatory

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/timer"
)

// deferredOnMock returns a purgatory whose deferral the test drives by
// hand, on a MockTimer's clock: step is the reaper's call. wrap, if set,
// wraps the deferral's Add (it must call add itself).
func deferredOnMock(t *testing.T, wrap func(op *optest.Op, add func() error) error) (*Purgatory[string, *optest.Op], *timer.MockTimer, func()) {
	t.Helper()
	mt := timer.NewMockTimer()
	p, err := New[string, *optest.Op]("deferred", WithTimer(mt), WithoutReaper())
	require.NoError(t, err)
	require.Nil(t, p.deferred, "a user's timer is never deferred to")
	p.deferred = &deferral{take: p.watchers.TakeHeld, add: func(o *lifecycle.Op, now int64) error {
		add := func() error { return p.addAt(lifecycle.Task(o), now) }
		if wrap == nil {
			return add()
		}
		return wrap(lifecycle.Self(o).(*optest.Op), add)
	}}
	t.Cleanup(func() { require.NoError(t, p.Shutdown(context.Background())) })
	step := func() { p.deferred.step(p.now()) }
	return p, mt, step
}

// drainCompletedOnce lets the deferral seal and drain what it holds (step
// is the reaper's call), then checks that op, which something completed
// meanwhile, completed once, left nothing in the timer, and never expires.
func drainCompletedOnce(t *testing.T, p *Purgatory[string, *optest.Op], mt *timer.MockTimer, step func(), op *optest.Op) {
	t.Helper()
	mt.Advance(time.Duration(deferHold))
	step()
	mt.Advance(time.Duration(deferHold))
	step()
	assert.Equal(t, 0, mt.Size(), "left in the timer")
	assert.Equal(t, int32(1), op.Completes.Load())
	mt.Advance(time.Hour)
	assert.Zero(t, op.Expiries.Load())
	assert.Equal(t, 0, p.NumDelayed())
}

func TestDeferralAddsOnlyWhatIsStillPending(t *testing.T) {
	p, mt, step := deferredOnMock(t, nil)
	const timeout = time.Hour
	ops := make([]*optest.Op, 4)
	for i := range ops {
		ops[i] = optest.New(timeout)
		done, err := p.TryCompleteElseWatch(ops[i], "k")
		require.NoError(t, err)
		require.False(t, done)
	}
	short := optest.New(deferMinTimeout - time.Millisecond)
	_, err := p.TryCompleteElseWatch(short, "k")
	require.NoError(t, err)
	assert.Equal(t, 1, mt.Size(), "a timeout shorter than deferMinTimeout goes straight to the timer")

	require.True(t, ops[0].ForceComplete())
	step()
	assert.Equal(t, 1, mt.Size(), "nothing leaves the deferral before it is sealed and has waited")
	mt.Advance(time.Duration(deferHold))
	step() // seals
	require.True(t, ops[1].ForceComplete())
	assert.Equal(t, 1, mt.Size(), "a sealed batch waits a deferHold")
	mt.Advance(time.Duration(deferHold))
	step() // drains
	assert.Equal(t, 3, mt.Size(), "the two pending long timeouts are in the timer, the completed ones are not")

	// The deadline is the park's: the wait in the deferral moved nothing.
	mt.Advance(timeout - 2*time.Duration(deferHold) - time.Millisecond)
	step()
	assert.Zero(t, ops[2].Expiries.Load()+ops[3].Expiries.Load(), "expired early")
	mt.Advance(2 * time.Millisecond)
	assert.Equal(t, int32(1), ops[2].Expiries.Load())
	assert.Equal(t, int32(1), ops[3].Expiries.Load())
	for _, o := range ops {
		assert.Equal(t, int32(1), o.Completes.Load())
	}
	assert.Equal(t, 0, mt.Size())
	assert.Equal(t, 0, p.NumDelayed())
}

// TestDeferralSeams runs a completion at each point of the deferral's add
// that another goroutine can reach: after the drain found the operation
// pending and before it is added, and after it is added but before the
// drain looks again. Either way the operation completes once and leaves
// nothing in the timer.
func TestDeferralSeams(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(op *optest.Op, add func() error) error
	}{
		{"before add", func(op *optest.Op, add func() error) error {
			op.ForceComplete()
			return add()
		}},
		{"after add", func(op *optest.Op, add func() error) error {
			err := add()
			op.ForceComplete()
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, mt, step := deferredOnMock(t, tc.wrap)
			op := optest.New(time.Hour)
			_, err := p.TryCompleteElseWatch(op, "k")
			require.NoError(t, err)
			drainCompletedOnce(t, p, mt, step, op)
		})
	}
}

// A completed operation is not kept alive by the deferral, whose Handle
// the completion clears. An operation watched on several keys is queued
// once.
func TestDeferralReleasesCompletedOperations(t *testing.T) {
	p, _, _ := deferredOnMock(t, nil)
	op := optest.New(time.Hour)
	_, err := p.TryCompleteElseWatch(op, "k", "l", "m")
	require.NoError(t, err)
	held := p.watchers.TakeHeld(nil)
	n := 0
	for _, cs := range held {
		for _, c := range cs {
			n += len(c)
		}
	}
	require.Equal(t, 1, n, "the operation waits in the deferral, once")
	wp := weak.Make(op)
	require.True(t, op.ForceComplete())
	op = nil
	require.Eventually(t, func() bool { runtime.GC(); return wp.Value() == nil },
		30*time.Second, time.Millisecond, "a completed operation is still reachable")
	runtime.KeepAlive(held)
}

// Shutdown expires what waits in the deferral, as it does the rest.
func TestDeferralShutdownExpires(t *testing.T) {
	p, err := New[string, *optest.Op]("deferred")
	require.NoError(t, err)
	require.NotNil(t, p.deferred)
	op := optest.New(time.Hour)
	_, err = p.TryCompleteElseWatch(op, "k")
	require.NoError(t, err)
	require.NoError(t, p.Shutdown(t.Context()))
	assert.Equal(t, int32(1), op.Expiries.Load())
	assert.ErrorIs(t, op.Cause(), operation.ErrShutdown)
}

// With the reaper and the system clock, a long timeout that nothing
// completes expires at its deadline, never before.
func TestDeferralExpiresOnTime(t *testing.T) {
	p, err := New[string, *optest.Op]("deferred")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Shutdown(context.Background())) })
	require.NotNil(t, p.deferred)
	expired := make(chan time.Time, 1)
	op := optest.New(deferMinTimeout)
	op.OnCompleteHook = func() { expired <- time.Now() }
	start := time.Now()
	_, err = p.TryCompleteElseWatch(op, "k")
	require.NoError(t, err)
	select {
	case at := <-expired:
		assert.GreaterOrEqual(t, at.Sub(start), deferMinTimeout, "expired early")
	case <-time.After(30 * time.Second):
		t.Fatal("a deferred timeout never expired")
	}
	// OnComplete has run; OnExpiration runs after it, on the reaper.
	assert.True(t, op.IsExpired())
}

// TestDeferralParkSeams completes an operation with a deferred timeout at
// each step of TryCompleteElseWatch, among them just before its Handle is
// queued with its first key (stepTried) and just after (stepBetweenKeys).
// It completes once, and nothing of it reaches the timer.
func TestDeferralParkSeams(t *testing.T) {
	for _, at := range Steps {
		t.Run(at.String(), func(t *testing.T) {
			p, mt, drain := deferredOnMock(t, nil)
			op := optest.New(time.Hour)
			stepHook = func(s step) {
				if s == at {
					op.ForceComplete()
				}
			}
			defer func() { stepHook = nil }()
			_, err := p.TryCompleteElseWatch(op, "k", "l")
			require.NoError(t, err)
			stepHook = nil
			drainCompletedOnce(t, p, mt, drain, op)
			assert.Equal(t, 0, p.Watched())
		})
	}
}
