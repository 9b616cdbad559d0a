package purgatory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// A long timeout waits in the deferral, not in the timer, and enters it at
// the tick the first park armed, 400 ms of the timer's clock later, with
// the deadline fixed at its park: it expires exactly on time.
func TestHeldTimeoutExpiresOnTime(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	op := newOp(time.Second)
	mustPark(t, p, op, "a")
	assert.Equal(t, 1, mt.Size(), "the tick alone")
	assert.Equal(t, 0, purgatory.TimerSize(p, mt), "held, not in the timer")

	mt.Advance(400 * time.Millisecond)
	assert.Equal(t, 1, purgatory.TimerSize(p, mt), "the tick added it")
	assert.Equal(t, 1, mt.Size(), "and is gone: nothing else is held")

	mt.Advance(600*time.Millisecond - time.Nanosecond)
	assert.Zero(t, op.Completes.Load(), "not a nanosecond early")
	mt.Advance(time.Nanosecond)
	assert.Equal(t, int32(1), op.Expiries.Load())
	assert.Equal(t, 0, mt.Size())
}

// A clock that jumps past the deadline (one Advance of an hour) runs the
// tick, which adds the operation already due: it expires in that same
// Advance, once.
func TestHeldTimeoutExpiresInOneJump(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	ops := []*mockOp{newOp(time.Second), newOp(30 * time.Second)}
	mustPark(t, p, ops[0], "a")
	mustPark(t, p, ops[1], "b")
	mt.Advance(time.Hour)
	for _, op := range ops {
		assert.Equal(t, int32(1), op.Completes.Load())
		assert.Equal(t, int32(1), op.Expiries.Load())
	}
	assert.Equal(t, 0, mt.Size())
	assert.Equal(t, uint64(2), p.Stats().Expired)
}

// An operation that completes while held never enters the timer.
func TestHeldOperationCompletedNeverEntersTheTimer(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	op := newOp(time.Second)
	mustPark(t, p, op, "a")
	op.Ready.Store(true)
	assert.Equal(t, 1, p.CheckAndComplete("a"))
	mt.Advance(400 * time.Millisecond)
	assert.Equal(t, 0, mt.Size(), "the tick found nothing pending to add")
	mt.Advance(time.Hour)
	assert.Zero(t, op.Expiries.Load())
}

// A completion exactly between the tick's finding the operation pending
// and its Add: the Add finds it completed and takes the entry out again.
// A completion exactly inside the Add, before the entry is linked, ends
// the same way.
func TestCompletionWhileTheTickAddsIt(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	var hook func()
	wrap := &addHookTimer{MockTimer: mt, hook: func(purgatory.Step) {
		if hook != nil {
			hook()
		}
	}}
	p, err := purgatory.New[string, *mockOp]("held", purgatory.WithTimer(wrap), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	op := newOp(time.Second)
	mustPark(t, p, op, "a") // arms the tick: the hook is not set yet
	hook = func() {
		if op.Completes.Load() == 0 {
			require.True(t, op.ForceComplete())
		}
	}
	mt.Advance(400 * time.Millisecond) // the tick's Add of op runs the hook
	hook = nil
	assert.Equal(t, int32(1), op.Completes.Load())
	assert.Equal(t, 0, mt.Size(), "nothing left in the timer")
	mt.Advance(time.Hour)
	assert.Zero(t, op.Expiries.Load())
	assert.Equal(t, 0, p.NumDelayed())
}

// Shutdown with operations held: by default each expires once with
// ErrShutdown; with WithLeavePendingOnShutdown each is left pending.
func TestShutdownWithHeldTimeouts(t *testing.T) {
	t.Parallel()
	for _, leave := range []bool{false, true} {
		opts := []purgatory.Option{}
		if leave {
			opts = append(opts, purgatory.WithLeavePendingOnShutdown())
		}
		p, err := purgatory.New[string, *mockOp]("held", opts...)
		require.NoError(t, err)
		ops := []*mockOp{newOp(time.Hour), newOp(time.Minute)}
		mustPark(t, p, ops[0], "a")
		mustPark(t, p, ops[1], "a", "b")
		require.NoError(t, p.Shutdown(context.Background()))
		for _, op := range ops {
			if leave {
				assert.False(t, op.IsCompleted())
			} else {
				assert.Equal(t, int32(1), op.Expiries.Load())
			}
		}
	}
}

// noClock is a Timer that does not report its clock.
type noClock struct{ mt *timer.MockTimer }

func (n noClock) Add(t timer.Task) error            { return n.mt.Add(t) }
func (n noClock) AdvanceClock(d time.Duration) bool { return n.mt.AdvanceClock(d) }
func (n noClock) Size() int                         { return n.mt.Size() }
func (n noClock) Close() error                      { return n.mt.Close() }

// With a Timer that does not report its clock, no deadline can be fixed
// on it: every timeout enters the timer at park.
func TestTimerWithoutClockGetsTimeoutsAtPark(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *mockOp]("no clock", purgatory.WithTimer(noClock{mt}), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	op := newOp(time.Hour)
	mustPark(t, p, op, "a")
	assert.Equal(t, 1, mt.Size(), "in the timer at park")
	mt.Advance(time.Hour)
	assert.Equal(t, int32(1), op.Expiries.Load())
}

// A park exactly between each pair of the deferral's steps (its push and
// its reading of armed; a tick's disarming and its taking; after the tick
// has taken everything) is never stranded: every operation, the racing
// one included, expires once, and nothing is left in the timer.
func TestParkBetweenTheDeferralsSteps(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"pushed", "disarmed", "drained"} {
		t.Run(at, func(t *testing.T) {
			p, mt := newMockPurgatory(t)
			first, racer := newOp(time.Second), newOp(time.Second)
			raced := false
			purgatory.SetDeferralHooks(p, func(step string) {
				if step != at || raced {
					return
				}
				raced = true
				if at == "pushed" {
					// The park of first is between its push and its check:
					// a whole tick runs here.
					mt.Advance(400 * time.Millisecond)
					return
				}
				mustPark(t, p, racer, "b") // on the tick's goroutine, as a callback might
			})
			if at == "pushed" {
				mustPark(t, p, first, "a")
				mustPark(t, p, racer, "b")
			} else {
				mustPark(t, p, first, "a")
				mt.Advance(400 * time.Millisecond) // the tick races the park
			}
			require.True(t, raced)
			mt.Advance(2 * time.Second)
			for _, op := range []*mockOp{first, racer} {
				assert.Equal(t, int32(1), op.Completes.Load())
				assert.Equal(t, int32(1), op.Expiries.Load())
			}
			assert.Equal(t, 0, mt.Size(), "nothing left in the timer, no tick either")
			assert.Equal(t, 0, p.NumDelayed())
		})
	}
}
