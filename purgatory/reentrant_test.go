package purgatory_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// A callback running under a SharedLock parks another operation that
// shares it, as Kafka's group coordinator parks a member's next heartbeat
// from its join's completion. Whichever way the first operation
// completes, the second ends up parked, watched and timed, once the lock
// is released, and every count is exact.
func TestParkFromCallbackUnderSharedLock(t *testing.T) {
	t.Parallel()
	paths := []struct {
		name     string
		into     string // "same" or "other": where the callback parks
		complete func(t *testing.T, p *pg, mt mockAdvancer, lock *operation.SharedLock, first *mockOp, cancel context.CancelFunc)
	}{
		{"park", "same", nil}, // first is Ready: its own park completes it
		{"check", "same", func(t *testing.T, p *pg, _ mockAdvancer, _ *operation.SharedLock, first *mockOp, _ context.CancelFunc) {
			first.Ready.Store(true)
			assert.Equal(t, 1, p.CheckAndComplete("join"))
		}},
		{"force under the lock", "same", func(t *testing.T, _ *pg, _ mockAdvancer, lock *operation.SharedLock, first *mockOp, _ context.CancelFunc) {
			lock.Lock()
			assert.True(t, first.ForceComplete())
			lock.Unlock()
		}},
		{"force", "same", func(t *testing.T, _ *pg, _ mockAdvancer, _ *operation.SharedLock, first *mockOp, _ context.CancelFunc) {
			assert.True(t, first.ForceComplete())
		}},
		{"expiry", "same", func(t *testing.T, _ *pg, mt mockAdvancer, _ *operation.SharedLock, _ *mockOp, _ context.CancelFunc) {
			mt.Advance(time.Second)
		}},
		{"context", "same", func(t *testing.T, _ *pg, _ mockAdvancer, _ *operation.SharedLock, first *mockOp, cancel context.CancelFunc) {
			cancel()
			require.Eventually(t, first.IsCompleted, 10*time.Second, time.Millisecond)
		}},
		{"shutdown", "other", func(t *testing.T, p *pg, _ mockAdvancer, _ *operation.SharedLock, _ *mockOp, _ context.CancelFunc) {
			require.NoError(t, p.Shutdown(context.Background()))
		}},
		{"CompleteForKey", "same", func(t *testing.T, p *pg, _ mockAdvancer, _ *operation.SharedLock, _ *mockOp, _ context.CancelFunc) {
			assert.Equal(t, 1, p.CompleteForKey("join", errMoved))
		}},
		{"Complete", "same", func(t *testing.T, p *pg, _ mockAdvancer, _ *operation.SharedLock, first *mockOp, _ context.CancelFunc) {
			assert.True(t, p.Complete(first, errMoved))
		}},
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			p, mt := newMockPurgatory(t)
			q, _ := newMockPurgatory(t)
			into := p
			if path.into == "other" {
				into = q
			}
			var lock operation.SharedLock
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := newOp(500*time.Millisecond, operation.WithLock(&lock), operation.WithContext(ctx))
			second := newOp(time.Minute, operation.WithLock(&lock))
			parked := make(chan error, 1)
			first.OnCompleteHook = func() {
				done, err := into.TryCompleteElseWatch(second, "heartbeat", "member")
				assert.False(t, done)
				parked <- err
			}
			if path.complete == nil {
				first.Ready.Store(true)
				done, err := p.TryCompleteElseWatch(first, "join")
				require.NoError(t, err)
				assert.True(t, done)
			} else {
				mustPark(t, p, first, "join")
				path.complete(t, p, mt, &lock, first, cancel)
			}
			require.NoError(t, <-parked)
			// The park ran when the lock was released: on this goroutine,
			// or, for the context, on the one that completed first.
			// Under a SharedLock a park makes its last TryComplete always:
			// checks leave their notes on the lock, not on the operation.
			require.Eventually(t, func() bool { return second.Tries.Load() == 2 }, 10*time.Second, time.Millisecond)
			require.Eventually(t, lock.TryLock, 10*time.Second, time.Millisecond, "the lock is released")
			lock.Unlock()
			assert.True(t, first.IsCompleted())
			assert.False(t, second.IsCompleted())
			assert.Equal(t, 1, into.NumDelayed())
			assert.Equal(t, 2, into.Watched())

			second.Ready.Store(true)
			assert.Equal(t, 1, into.CheckAndComplete("member"))
			assert.Equal(t, 0, into.NumDelayed())
			st := into.Stats()
			assert.Equal(t, 0, st.Pending)
			assert.Equal(t, 0, st.Watched)
		})
	}
}

// mockAdvancer is the part of a MockTimer the paths use.
type mockAdvancer interface{ Advance(time.Duration) int }

// A park under a held SharedLock makes its refusals at once.
func TestDeferredParkRefusesAtOnce(t *testing.T) {
	t.Parallel()
	p, _ := newMockPurgatory(t, purgatory.WithMaxPending(1))
	var lock operation.SharedLock
	lock.Lock()
	a := newOp(time.Second, operation.WithLock(&lock))
	done, err := p.TryCompleteElseWatch(a, "k")
	require.NoError(t, err)
	assert.False(t, done)
	_, err = p.TryCompleteElseWatch(newOp(time.Second, operation.WithLock(&lock)), "k")
	assert.ErrorIs(t, err, purgatory.ErrFull, "a's place is taken while its park waits")
	assert.Equal(t, 0, p.NumDelayed(), "not parked until the unlock")
	lock.Unlock()
	assert.Equal(t, 1, p.NumDelayed())

	q, _ := newMockPurgatory(t)
	lock.Lock()
	_, err = q.TryCompleteElseWatch(a, "k")
	assert.ErrorIs(t, err, purgatory.ErrAlreadyWatched, "parked in p")
	b := newOp(time.Second, operation.WithLock(&lock))
	b.ForceComplete()
	_, err = q.TryCompleteElseWatch(b, "k")
	assert.ErrorIs(t, err, purgatory.ErrAlreadyWatched, "completed before its park")
	_, err = q.TryCompleteElseWatch(newOp(time.Second, operation.WithLock(&lock)))
	assert.ErrorIs(t, err, purgatory.ErrNoKeys)
	lock.Unlock()
	assert.Equal(t, 0, q.NumDelayed())
	assert.Equal(t, 1, p.NumDelayed())
}

// The holder of the SharedLock releases it exactly between a park's
// finding it held and its handing the park over: nobody is left to unlock
// after the hand-over, so the park must run it itself.
func TestDeferredParkWhenTheHolderLeaves(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	var lock operation.SharedLock
	op := newOp(seamTimeout, operation.WithLock(&lock))
	lock.Lock()
	defer purgatory.SetStepHook(p, func(s purgatory.Step) {
		if s == purgatory.StepDeferred {
			lock.Unlock()
		}
	})()
	done, err := p.TryCompleteElseWatch(op, "a", "b")
	require.NoError(t, err)
	assert.False(t, done)
	assert.Equal(t, 1, p.NumDelayed(), "the park was lost")
	assert.Equal(t, 2, p.Watched())
	assert.Equal(t, 1, mt.Size())
	assert.True(t, lock.TryLock())
	lock.Unlock()
}

// A park deferred by a held SharedLock is finished before the lock is
// released: whoever takes the lock next finds the operation parked,
// watched and tried, as under Kafka's re-entrant lock. Before, the park ran
// after the unlock, and a goroutine waiting for the lock could take it
// first and find the operation not yet parked.
func TestDeferredParkFinishesInsideTheLock(t *testing.T) {
	t.Parallel()
	p, _ := newMockPurgatory(t)
	var lock operation.SharedLock
	for i := range 200 {
		op := newOp(time.Minute, operation.WithLock(&lock))
		key := "k" + strconv.Itoa(i)
		lock.Lock()
		_, err := p.TryCompleteElseWatch(op, key)
		require.NoError(t, err)
		seen := make(chan bool)
		started := make(chan struct{})
		go func() {
			close(started)
			lock.Lock() // waits for the holder
			seen <- op.Tries.Load() > 0 && p.NumDelayed() == i+1
			lock.Unlock()
		}()
		<-started
		runtime.Gosched()
		lock.Unlock()
		require.True(t, <-seen, "round %d: the next holder found the park unfinished", i)
	}
}

// A ForceComplete from outside the lock that comes before a deferred park
// has run: the park is dropped quietly, and the operation, which its park
// call accepted, is counted as completed early.
func TestDeferredParkOvertakenByForceComplete(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	p, mt := newMockPurgatory(t, purgatory.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	var lock operation.SharedLock
	op := newOp(time.Second, operation.WithLock(&lock))
	lock.Lock()
	_, err := p.TryCompleteElseWatch(op, "a")
	require.NoError(t, err)
	go op.ForceComplete() // another goroutine, not holding the lock
	require.Eventually(t, func() bool { return op.Completes.Load() == 1 }, 10*time.Second, time.Millisecond)
	lock.Unlock()

	st := p.Stats()
	assert.Equal(t, uint64(1), st.CompletedEarly)
	assert.Equal(t, 0, st.Pending)
	assert.Equal(t, 0, st.Watched)
	assert.Equal(t, 0, mt.Size())
	assert.Equal(t, int32(1), op.Completes.Load())
	assert.Zero(t, op.Tries.Load(), "a completed operation was tried")
	assert.Empty(t, logged.String())
}
