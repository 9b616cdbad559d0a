package core

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestListSize(t *testing.T) {
	if got := unsafe.Sizeof(List{}); got%128 != 0 {
		t.Fatalf("List is %d bytes, not a multiple of 128", got)
	}
}

// What linking and unlinking write in a List shares one 64-byte line.
func TestHotFieldsInOneLine(t *testing.T) {
	if end := hotEnd(); end > 64 {
		t.Fatalf("the hot fields end at byte %d, past the first line", end)
	}
}

// The add-lock excludes: goroutines that take it with LockAdd and HoldAdd
// never overlap, and a goroutine that found it held and went to sleep is
// woken by the holder's UnlockAdd (a lost wake-up would hang the test).
func TestAddLockExcludesAndWakes(t *testing.T) {
	var e Entry
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				if (g+i)%2 == 0 {
					e.LockAdd()
				} else {
					e.HoldAdd()
				}
				n := inside.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				if i%100 == 0 {
					runtime.Gosched() // let others find it held and sleep
				}
				inside.Add(-1)
				e.UnlockAdd()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), most.Load())
	assert.Zero(t, e.State.Load()&(addLock|addWaiters), "let go, and no one asleep")
}

// WaitBit, exactly between a holder's taking the lock and its letting go:
// the waiter asks to be woken (the waiters bit) and sleeps, does not
// return while the lock is held, and returns once the holder clears both
// bits and wakes it. A free lock is not waited for.
func TestWaitBitSleepsUntilWoken(t *testing.T) {
	var w atomic.Uint32
	WaitBit(&w, addLock, addWaiters) // free: returns at once
	w.Store(addLock | statePending)
	done := make(chan struct{})
	go func() {
		WaitBit(&w, addLock, addWaiters)
		close(done)
	}()
	assert.Eventually(t, func() bool { return w.Load()&addWaiters != 0 }, 10*time.Second, time.Millisecond,
		"the waiter asked to be woken")
	select {
	case <-done:
		t.Fatal("WaitBit returned while the lock was held")
	default:
	}
	old := w.And(^(addLock | addWaiters))
	assert.Equal(t, addLock|addWaiters|statePending, old, "the other bits are the holder's to keep")
	WakeBit(&w)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	assert.Equal(t, statePending, w.Load())
}

// Regression (issue 35, 4): a Cancel of a pending task racing an Add of
// the same task on another goroutine ends one of two ways, never a third:
// cancelled and in no bucket (the Add came first), or pending in a bucket
// and run at its deadline (the Add came after). A Cancel used to unlink
// after its swap without the add-lock, so an Add in between linked the
// task into its new bucket, and the late unlink took that link out: the
// task was pending in no bucket, never ran, and Size did not count it.
// The two goroutines start each try together, spinning on a counter.
func TestCancelRacingReAdd(t *testing.T) {
	t.Parallel()
	tries := 50_000
	if testing.Short() {
		tries = 5_000
	}
	st, clk := newInlineTimer(t, withWheelSize(4))
	task := newProbe(time.Millisecond)
	var turn, cancelled atomic.Int64
	var results [2]atomic.Bool
	go func() {
		for i := int64(1); i <= int64(tries); i++ {
			for turn.Load() != i {
			}
			results[i%2].Store(task.Cancel())
			cancelled.Store(i)
		}
	}()
	for i := 1; i <= tries; i++ {
		task.SetDelay(time.Duration(1+i%3) * time.Millisecond)
		require.NoError(t, st.Add(task))
		task.SetDelay(time.Duration(2+i%5) * time.Millisecond) // another bucket
		turn.Store(int64(i))
		require.NoError(t, st.Add(task))
		for cancelled.Load() != int64(i) {
		}
		e := task.entry()
		switch {
		case e.IsCancelled():
			require.False(t, e.Linked(), "try %d: a cancelled task is in no bucket", i)
			require.Zero(t, st.Size(), "try %d", i)
		case e.IsPending():
			require.True(t, e.Linked(), "try %d: a pending task is in a bucket", i)
			require.Equal(t, 1, st.Size(), "try %d", i)
			runs := task.runs.Load()
			clk.Advance(10 * time.Millisecond)
			st.runDue()
			require.Equal(t, runs+1, task.runs.Load(), "try %d: a pending task runs", i)
		default:
			t.Fatalf("try %d: neither pending nor cancelled", i)
		}
	}
}

// Issue 35, 4, at the seam: a Cancel that runs while a re-Add of the same
// pending task holds its add-lock (between the Add's reading of the clock
// and its filing) wins. The Cancel swaps the state and does not wait for
// the add-lock, which this very goroutine holds. The Add takes the task
// out of its old bucket, as any re-Add does, and links it nowhere: the
// new bucket refuses a cancelled entry, and the Add's UnlockAdd would
// take out what it had linked (the test fails only with both undone).
// The task is in no bucket, counted nowhere, and never runs.
func TestCancelInsideReAdd(t *testing.T) {
	st, clk := newInlineTimer(t, withWheelSize(4))
	task := newProbe(time.Millisecond)
	require.NoError(t, st.Add(task))
	require.NotNil(t, bucketOf(task))
	tried, cancelled := false, false
	st.hooks = &hooks{clockRead: func() {
		if !tried {
			tried = true
			cancelled = task.Cancel()
		}
	}}
	task.SetDelay(3 * time.Millisecond) // another bucket
	require.NoError(t, st.Add(task))
	require.True(t, tried)
	assert.True(t, cancelled, "the Cancel found the task pending")
	assert.True(t, task.entry().IsCancelled())
	assert.Nil(t, bucketOf(task), "in no bucket")
	assert.Zero(t, st.Size(), "counted nowhere")
	clk.Advance(10 * time.Millisecond)
	st.runDue()
	assert.Zero(t, task.runs.Load(), "never run")
}
