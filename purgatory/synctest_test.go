//go:build go1.25

package purgatory_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/purgatory"
)

// A purgatory made with default options (its own timer and reaper) inside
// a testing/synctest bubble runs on the bubble's fake time: a short and a
// long timeout expire exactly at their deadlines, never a tick early; an
// operation completed early never expires; and Shutdown leaves no
// goroutine behind (synctest.Test fails if any is left in the bubble).
func TestDefaultPurgatoryInsideSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var times timeSum
		p, err := purgatory.New[string, *mockOp]("bubble", purgatory.WithObserver(&times))
		require.NoError(t, err)
		start := time.Now()

		expiredAt := func(op *mockOp) chan time.Duration {
			at := make(chan time.Duration, 1)
			op.OnCompleteHook = func() { at <- time.Since(start) }
			return at
		}
		short, long, early := newOp(50*time.Millisecond), newOp(30*time.Second), newOp(time.Minute)
		shortAt, longAt := expiredAt(short), expiredAt(long)
		mustPark(t, p, short, "a")
		mustPark(t, p, long, "b")
		mustPark(t, p, early, "c")

		time.Sleep(10 * time.Millisecond)
		early.Ready.Store(true)
		assert.Equal(t, 1, p.CheckAndComplete("c"))

		time.Sleep(40*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		assert.Zero(t, short.Completes.Load(), "not a nanosecond early")
		assert.Equal(t, 50*time.Millisecond, <-shortAt, "expired at its deadline, in fake time")
		assert.Equal(t, int32(1), short.Expiries.Load())

		time.Sleep(30*time.Second - 50*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		assert.Zero(t, long.Completes.Load(), "not a nanosecond early")
		assert.Equal(t, 30*time.Second, <-longAt)
		assert.Equal(t, int32(1), long.Expiries.Load())

		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, int32(1), early.Completes.Load())
		assert.Zero(t, early.Expiries.Load(), "completed early: never expired")

		st := p.Stats()
		assert.Equal(t, uint64(2), st.Expired)
		assert.Equal(t, uint64(1), st.CompletedEarly)
		assert.Equal(t, uint64(2), times.n[purgatory.OutcomeExpired].Load())
		assert.Equal(t, 30*time.Second+50*time.Millisecond, time.Duration(times.sum[purgatory.OutcomeExpired].Load()),
			"times measured on the bubble's clock")

		parked := newOp(time.Hour)
		mustPark(t, p, parked, "d")
		require.NoError(t, p.Shutdown(context.Background()))
		assert.Equal(t, int32(1), parked.Expiries.Load(), "Shutdown expires what is pending")
	})
}

// Inside a bubble, a session kept alive by ResetTimeout expires exactly
// its timeout after the last reset, on the bubble's fake time, for a
// timeout the purgatory holds back (10 s) as for one it adds at once.
func TestResetTimeoutInsideSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p, err := purgatory.New[string, *mockOp]("bubble")
		require.NoError(t, err)
		start := time.Now()
		for _, session := range []time.Duration{300 * time.Millisecond, 10 * time.Second} {
			op := newOp(session)
			at := make(chan time.Duration, 1)
			op.OnCompleteHook = func() { at <- time.Since(start) }
			mustPark(t, p, op, "member")
			var last time.Duration
			for range 5 {
				time.Sleep(session / 2)
				require.True(t, p.ResetTimeout(op, session))
				last = time.Since(start)
			}
			time.Sleep(session - time.Nanosecond)
			synctest.Wait()
			assert.Zero(t, op.Completes.Load(), "%v: expired before its reset deadline", session)
			assert.Equal(t, last+session, <-at, "%v: expired at the last reset's deadline", session)
			assert.True(t, op.IsExpired())
		}
		require.NoError(t, p.Shutdown(context.Background()))
	})
}

// Complete after ResetTimeout, and inside a synctest bubble on the
// default timer: the hang-up waits for a TryComplete under way on the
// bubble's goroutines as it does outside, and the moved deadline never
// fires once the operation is gone.
func TestCompleteInsideSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := purgatory.New[string, *receiver]("bubble")
		require.NoError(t, err)
		defer func() { require.NoError(t, p.Shutdown(context.Background())) }()
		var q atomic.Int64
		r := newReceiver(&q)
		parkReceiver(t, p, r)
		require.True(t, p.ResetTimeout(r, time.Minute))

		release := make(chan struct{})
		r.during = func() { <-release } // a claim under way
		q.Store(1)
		checked := make(chan int, 1)
		go func() { checked <- p.CheckAndCompleteN("q", 1) }()
		synctest.Wait() // the check holds r's lock, inside its TryComplete
		won := make(chan bool, 1)
		go func() { won <- p.Complete(r, errGone) }()
		synctest.Wait() // Complete waits for the lock: durably blocked
		select {
		case <-won:
			t.Fatal("Complete returned while a TryComplete held the operation's lock")
		default:
		}
		close(release)
		assert.Equal(t, 1, <-checked)
		assert.False(t, <-won)
		assert.True(t, r.claimed.Load())
		assert.False(t, r.stranded.Load())
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		assert.False(t, r.IsExpired())
		assert.Equal(t, int32(1), r.completes.Load())
	})
}
