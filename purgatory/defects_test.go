package purgatory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// Regression: a park overtaken by Shutdown ends the same way whatever its
// timeout. Shutdown starts exactly before the park's Add to the timer
// (which the closed timer then refuses), and just after it, while the
// park holds the operation's lock. By default Shutdown's sweep waits for
// that lock, and the park expires the operation itself, with ErrShutdown,
// exactly once; with WithLeavePendingOnShutdown Shutdown returns at once
// and the operation is left pending, as every other pending operation is.
func TestShutdownDuringParkEndsOneWay(t *testing.T) {
	t.Parallel()
	for _, leave := range []bool{false, true} {
		for _, step := range []purgatory.Step{purgatory.StepWatched, purgatory.StepTimed} {
			for _, timeout := range []time.Duration{100 * time.Millisecond, time.Second, time.Hour} {
				name := fmt.Sprintf("leave=%v/%v/%v", leave, step, timeout)
				t.Run(name, func(t *testing.T) {
					var opts []purgatory.Option
					if leave {
						opts = append(opts, purgatory.WithLeavePendingOnShutdown())
					}
					p, err := purgatory.New[string, *mockOp]("overtaken", opts...)
					require.NoError(t, err)
					waiting := make(chan struct{}, 1)
					purgatory.SetContendedHook(p, func(*lifecycle.Op) { waiting <- struct{}{} })
					shut := make(chan error, 1)
					defer purgatory.SetStepHook(p, func(s purgatory.Step) {
						if s != step {
							return
						}
						go func() { shut <- p.Shutdown(context.Background()) }()
						if leave {
							require.NoError(t, <-shut)
						} else {
							<-waiting // the sweep waits for the lock the park holds
						}
					})()
					op := newOp(timeout)
					done, err := p.TryCompleteElseWatch(op, "a")
					require.NoError(t, err, "accepted before Shutdown began")
					assert.False(t, done)
					if leave {
						assert.False(t, op.IsCompleted(), "left as it is")
						assert.Zero(t, op.Completes.Load())
						assert.Equal(t, 1, p.NumDelayed())
						return
					}
					require.NoError(t, <-shut)
					assert.Equal(t, int32(1), op.Completes.Load())
					assert.Equal(t, int32(1), op.Expiries.Load())
					assert.ErrorIs(t, op.Cause(), purgatory.ErrShutdown)
					assert.Equal(t, 0, p.NumDelayed())
				})
			}
		}
	}
}

// Regression: CancelForKey returns what it documents: the operations
// watching the key without a level in the order they were parked, then
// those watching at a level, lowest first, ties in the order parked.
func TestCancelForKeyOrder(t *testing.T) {
	t.Parallel()
	p, err := purgatory.New[string, operation.DelayedOperation]("order", purgatory.WithoutTimer(), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	var hw hwm
	var tries atomic.Int64
	var parked []operation.DelayedOperation
	park := func(op operation.DelayedOperation) {
		_, err := p.TryCompleteElseWatch(op, "k")
		require.NoError(t, err)
		parked = append(parked, op)
	}
	for i, lv := range []int64{30, 10, 20, 5, 25, 10} {
		park(newProduceOp(lv, &hw, &tries))
		if i%2 == 0 {
			park(newOp(time.Hour))
		}
	}
	want := []operation.DelayedOperation{parked[1], parked[4], parked[7]} // plain, in park order
	for _, i := range []int{5, 2, 8, 3, 6, 0} {                           // levels 5, 10, 10, 20, 25, 30
		want = append(want, parked[i])
	}
	got := p.CancelForKey("k")
	require.Len(t, got, len(want))
	for i := range want {
		assert.Same(t, want[i], got[i], "position %d", i)
	}
	assert.Equal(t, 0, p.NumDelayed())
}
