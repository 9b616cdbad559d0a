package purgatory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// A reset moves the deadline later and earlier, never early, and Timeout
// reports the new timeout: for short timeouts, which go into the wheels at
// park, and long ones, which the timer stages first (timer/stage.go).
func TestResetTimeoutMovesTheDeadline(t *testing.T) {
	t.Parallel()
	for _, base := range []time.Duration{100 * time.Millisecond, 2 * time.Second} {
		t.Run(base.String(), func(t *testing.T) {
			p, mt := newMockPurgatory(t)
			op := newOp(base)
			mustPark(t, p, op, "a")

			mt.Advance(base / 2)
			require.True(t, p.ResetTimeout(op, base)) // due at 1.5 base now
			assert.Equal(t, base, op.Timeout())
			mt.Advance(base - base/4) // 1.25 base: the old deadline has passed
			assert.False(t, op.IsCompleted(), "expired at its old deadline")
			mt.Advance(base/4 + time.Millisecond)
			assert.True(t, op.IsExpired(), "not expired at its new deadline")
			assert.Equal(t, int32(1), op.Expiries.Load())

			// Earlier: from 3 base to 1 base.
			op2 := newOp(3 * base)
			mustPark(t, p, op2, "a")
			require.True(t, p.ResetTimeout(op2, base/2))
			mt.Advance(base/2 - time.Millisecond)
			assert.False(t, op2.IsCompleted())
			mt.Advance(2 * time.Millisecond)
			assert.True(t, op2.IsExpired())

			st := p.Stats()
			assert.Equal(t, uint64(2), st.Expired)
			assert.Equal(t, 0, st.Pending)
			assert.Equal(t, 0, mt.Size())
		})
	}
}

// Many resets of one operation leave one timer entry, and the operation on
// its keys: checks still find it.
func TestResetTimeoutKeepsOneEntryAndTheWatches(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	op := newOp(100 * time.Millisecond)
	mustPark(t, p, op, "a", "b")
	for range 1000 {
		require.True(t, p.ResetTimeout(op, 100*time.Millisecond))
		mt.Advance(10 * time.Millisecond)
	}
	assert.Equal(t, 1, mt.Size())
	assert.Equal(t, 1, p.NumDelayed())
	assert.Equal(t, 2, p.Watched())
	op.Ready.Store(true)
	assert.Equal(t, 1, p.CheckAndComplete("b"))
	assert.Equal(t, 0, mt.Size())
	assert.False(t, op.IsExpired())
}

// ResetTimeout refuses what is not pending in this purgatory, changing
// nothing.
func TestResetTimeoutRefuses(t *testing.T) {
	t.Parallel()
	p, _ := newMockPurgatory(t)
	other, _ := newMockPurgatory(t)

	assert.False(t, p.ResetTimeout(nil, time.Second), "nil")
	fresh := newOp(time.Second)
	assert.False(t, p.ResetTimeout(fresh, time.Minute), "never parked")
	assert.Equal(t, time.Second, fresh.Timeout())

	elsewhere := newOp(time.Second)
	mustPark(t, other, elsewhere, "a")
	assert.False(t, p.ResetTimeout(elsewhere, time.Minute), "parked in another purgatory")
	assert.Equal(t, time.Second, elsewhere.Timeout())

	done := newOp(time.Second)
	mustPark(t, p, done, "a")
	done.ForceComplete()
	assert.False(t, p.ResetTimeout(done, time.Minute), "completed")

	cancelled := newOp(time.Second)
	mustPark(t, p, cancelled, "c")
	require.Len(t, p.CancelForKey("c"), 1)
	assert.False(t, p.ResetTimeout(cancelled, time.Minute), "cancelled")
}

// A timeout of zero or less makes the operation due at once, as a park
// with one does: the next Advance, Advance(0) included, expires it.
func TestResetTimeoutToZeroExpires(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	op := newOp(time.Hour)
	mustPark(t, p, op, "a")
	assert.True(t, p.ResetTimeout(op, 0))
	assert.False(t, op.IsCompleted(), "ResetTimeout runs no expiry itself")
	assert.Equal(t, 1, mt.Advance(0))
	assert.True(t, op.IsExpired())
	assert.ErrorIs(t, op.Cause(), operation.ErrExpired)
	assert.Equal(t, uint64(1), p.Stats().Expired)
}

// After Shutdown there is nothing to reset; with WithoutTimer only the
// timeout changes.
func TestResetTimeoutAfterShutdownAndWithoutTimer(t *testing.T) {
	t.Parallel()
	p, _ := newMockPurgatory(t)
	op := newOp(time.Hour)
	mustPark(t, p, op, "a")
	require.NoError(t, p.Shutdown(context.Background()))
	assert.False(t, p.ResetTimeout(op, time.Second))
	assert.True(t, errors.Is(op.Cause(), purgatory.ErrShutdown))

	q, err := purgatory.New[string, *mockOp]("no-timer", purgatory.WithoutTimer())
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	op2 := newOp(time.Hour)
	mustPark(t, q, op2, "a")
	assert.True(t, q.ResetTimeout(op2, time.Millisecond))
	assert.Equal(t, time.Millisecond, op2.Timeout())
	assert.False(t, op2.IsCompleted())
}

// A reset allocates nothing.
func TestResetTimeoutAllocatesNothing(t *testing.T) {
	p, _ := newMockPurgatory(t)
	op := newOp(time.Second)
	mustPark(t, p, op, "a")
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		p.ResetTimeout(op, time.Second)
	}))
}

// With a Timer that does not report its clock, the purgatory holds nothing
// back and a reset leaves the timer to measure the new timeout from its
// Add.
func TestResetTimeoutWithATimerWithoutClock(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *mockOp]("no-clock",
		purgatory.WithTimer(struct{ timer.Timer }{mt}), purgatory.WithoutReaper())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Shutdown(context.Background())) })
	op := newOp(2 * time.Second)
	mustPark(t, p, op, "a")
	mt.Advance(time.Second)
	require.True(t, p.ResetTimeout(op, 3*time.Second))
	mt.Advance(3*time.Second - time.Millisecond)
	assert.False(t, op.IsCompleted(), "expired early")
	mt.Advance(time.Millisecond)
	assert.True(t, op.IsExpired())
	assert.Equal(t, 0, mt.Size())
}
