package timer_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/timer"
)

// ranTask counts its runs and says when one is over.
type ranTask struct {
	timer.TaskBase
	runs atomic.Int32
	ran  chan struct{}
}

func (r *ranTask) Run() {
	r.runs.Add(1)
	if r.ran != nil {
		r.ran <- struct{}{}
	}
}

// cancelRaces is how many times each test races a Cancel with its task's
// deadline.
const cancelRaces = 100_000

// Issue 43, 3: Cancel's result is exact when it races the task's deadline,
// as time.Timer.Stop's is: a Cancel that reports true stops the run, and
// one that reports false comes after the task was taken to run, which then
// runs, once. Each round adds the task due a nanosecond later and lets
// another goroutine advance a MockTimer past the deadline while this one
// cancels; once the Advance has returned, exactly one of them has won.
func TestCancelRacingItsDeadlineOnAMockTimer(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	defer mt.Close()
	task := &ranTask{}
	task.SetDelay(time.Nanosecond)
	start, advanced := make(chan struct{}), make(chan struct{})
	go func() {
		for range start {
			mt.Advance(time.Nanosecond)
			advanced <- struct{}{}
		}
	}()
	defer close(start)
	won := 0
	for i := range cancelRaces {
		task.runs.Store(0)
		require.NoError(t, mt.Add(task))
		start <- struct{}{}
		stopped := task.Cancel()
		<-advanced
		runs := task.runs.Load()
		if stopped == (runs == 1) || runs > 1 {
			t.Fatalf("round %d: Cancel reported %v and Run ran %d times", i, stopped, runs)
		}
		if stopped {
			won++
		}
	}
	t.Logf("Cancel won %d of %d races", won, cancelRaces)
	assert.Zero(t, mt.Size())
}

// The same on a SystemTimer with an executor, advanced by another
// goroutine: a Run taken before the Cancel may still be waiting for the
// executor when Cancel returns false, and comes; one that Cancel stopped
// never does (checked once the timer is closed, which waits for the
// executor).
func TestCancelRacingItsDeadlineOnASystemTimer(t *testing.T) {
	t.Parallel()
	clock := &optest.StepClock{}
	st, err := timer.NewSystemTimer("race", timer.WithClock(clock), timer.WithTick(time.Nanosecond))
	require.NoError(t, err)
	task := &ranTask{ran: make(chan struct{}, 1)}
	task.SetDelay(time.Nanosecond)
	start, advanced := make(chan struct{}), make(chan struct{})
	go func() {
		for range start {
			clock.Step(time.Nanosecond)
			for st.AdvanceClock(0) {
			}
			advanced <- struct{}{}
		}
	}()
	lost := 0
	for i := range cancelRaces {
		require.NoError(t, st.Add(task))
		start <- struct{}{}
		if i%2 == 1 {
			runtime.Gosched() // let the advance get ahead, half the time
		}
		stopped := task.Cancel()
		<-advanced
		if !stopped {
			lost++
			select {
			case <-task.ran:
			case <-time.After(time.Minute): // a generous bound on a hang, not a timing
				t.Fatalf("round %d: Cancel reported false and Run never came", i)
			}
		}
	}
	close(start)
	require.NoError(t, st.Close())
	assert.Equal(t, int32(lost), task.runs.Load(), "a Run for every Cancel that reported false, and for no other")
	t.Logf("Cancel won %d of %d races", cancelRaces-lost, cancelRaces)
}
