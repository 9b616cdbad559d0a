package core

import (
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stuckClock is a Clock whose timers never fire: a poll on it wakes only
// when something sends on its queue's channels, as a poll on the system
// clock does when no processor is free to run its timer.
type stuckClock struct{ now atomic.Int64 }

func (c *stuckClock) Now() time.Duration                { return time.Duration(c.now.Load()) }
func (c *stuckClock) NewTimer(time.Duration) ClockTimer { return stuckTimer{} }

type stuckTimer struct{}

func (stuckTimer) C() <-chan time.Time { return nil }
func (stuckTimer) Reset(time.Duration) {}
func (stuckTimer) Stop()               {}

// stampTask records the system clock's reading when it runs.
type stampTask struct {
	taskBase
	ran atomic.Int64
}

func (s *stampTask) Run() { s.ran.Store(int64(SystemNow())) }

func newNudgedQueue() (*delayQueue, *stuckClock) {
	clk := &stuckClock{}
	return newDelayQueue(clk.Now, clk, time.Millisecond), clk
}

func bucketDue(tick int64) *bucket {
	b := &bucket{}
	b.init()
	b.expiration.Store(tick)
	return b
}

// A poll asleep for a bucket counts as late nudgeAfter after the bucket is
// due. Its own timer has not fired; a nudge wakes it, and it returns the
// bucket.
func TestNudgeWakesALatePoll(t *testing.T) {
	q, clk := newNudgedQueue()
	assert.False(t, q.late(math.MaxInt64-1), "nothing is late before a poll")
	b := bucketDue(10)
	q.offer(b)
	got := make(chan bool, 1)
	go func() { got <- q.wait(time.Hour) }()
	lateAt := int64(10*time.Millisecond + nudgeAfter)
	require.Eventually(t, func() bool { return q.lateAt.Load() == lateAt },
		10*time.Second, time.Millisecond, "the poll sleeps for the bucket")

	assert.False(t, q.late(lateAt), "on time up to nudgeAfter past the bucket")
	clk.now.Store(lateAt + 1)
	require.True(t, q.late(lateAt+1))
	q.nudge(lateAt + 1)
	select {
	case g := <-got:
		assert.True(t, g)
		assert.Same(t, b, q.pollDue(time.Duration(lateAt+1)))
	case <-time.After(10 * time.Second):
		t.Fatal("the nudged poll did not wake")
	}
}

// A poll whose own deadline comes just before the head bucket is due sleeps
// until that deadline, not for the bucket, and is still late nudgeAfter
// after the bucket is due: if the deadline's timer is not run, neither is
// the next poll that would return the bucket. Before this, such a poll
// counted as having nothing due, and a purgatory's first expiries waited
// for the scheduler to preempt whatever held the processors.
func TestPollUntilDeadlineIsLateForTheHead(t *testing.T) {
	q, clk := newNudgedQueue()
	b := bucketDue(10)
	q.offer(b)
	<-q.wake
	got := make(chan bool, 1)
	go func() { got <- q.wait(9 * time.Millisecond) }()
	lateAt := int64(10*time.Millisecond + nudgeAfter)
	require.Eventually(t, func() bool { return q.lateAt.Load() == lateAt },
		10*time.Second, time.Millisecond, "the poll sleeps until 9 ms, late for the bucket at 10")

	clk.now.Store(lateAt + 1)
	q.nudge(lateAt + 1)
	select {
	case g := <-got:
		assert.True(t, g, "woken past its deadline, the wait reports the due bucket")
		assert.Same(t, b, q.pollDue(time.Duration(lateAt+1)))
	case <-time.After(10 * time.Second):
		t.Fatal("the nudged poll did not wake")
	}
}

// A poll with nothing queued is never late, however long it sleeps.
func TestPollWithNothingQueuedIsNeverLate(t *testing.T) {
	q, clk := newNudgedQueue()
	got := make(chan bool, 1)
	go func() { got <- q.wait(time.Hour) }()
	require.Eventually(t, q.polling.Load, 10*time.Second, time.Millisecond)
	// working stores now+nudgeAfter first; the sleep then stores MaxInt64.
	require.Eventually(t, func() bool { return q.lateAt.Load() == math.MaxInt64 },
		10*time.Second, time.Millisecond)
	clk.now.Store(int64(time.Hour))
	assert.False(t, q.late(int64(time.Hour)))
	q.stop()
	assert.False(t, <-got)
}

// Of the Adds that find the same lateness, one nudges; the next nudge comes
// nudgeAfter later if the advancing goroutine has still not run.
func TestNudgeOncePerInterval(t *testing.T) {
	q, _ := newNudgedQueue()
	q.lateAt.Store(100)
	q.nudge(100) // not late: nothing
	assert.Empty(t, q.wake)
	q.nudge(101)
	assert.Len(t, q.wake, 1, "a late poll is woken")
	assert.Equal(t, 101+int64(nudgeAfter), q.lateAt.Load(), "and given nudgeAfter more")
	<-q.wake
	q.nudge(102)
	q.nudge(101 + int64(nudgeAfter))
	assert.Empty(t, q.wake, "no second nudge within nudgeAfter")
	q.nudge(102 + int64(nudgeAfter))
	assert.Len(t, q.wake, 1)
}

// A bucket that becomes the head while a poll runs makes that poll late
// nudgeAfter after the bucket is due, even before the poll has woken to
// look at it: a poll that sleeps with nothing due, or for a later bucket,
// may not be run for a long while after the offer wakes it.
func TestOfferWhilePollingSetsLateness(t *testing.T) {
	q, _ := newNudgedQueue()
	q.offer(bucketDue(50))
	assert.Equal(t, int64(math.MaxInt64), q.lateAt.Load(), "no poll: nothing is late")
	<-q.wake

	q.polling.Store(true)
	q.offer(bucketDue(30))
	assert.Equal(t, int64(30*time.Millisecond+nudgeAfter), q.lateAt.Load())
	q.offer(bucketDue(40))
	assert.Equal(t, int64(30*time.Millisecond+nudgeAfter), q.lateAt.Load(), "not the head: no change")
}

// An Add nudges only a late timer. The same code runs on every clock, and
// a MockTimer, which advances without polling, is never late.
func TestAddNudgesOnlyALateTimer(t *testing.T) {
	st := newTimer("nudge")
	t.Cleanup(func() { _ = st.Close() })

	p := newProbe(time.Hour)
	require.NoError(t, st.Add(p))
	assert.Equal(t, int64(math.MaxInt64), st.queue.lateAt.Load(), "on time: no nudge")

	// A nudge re-arms lateAt, nudgeAfter after the Add's reading of the
	// clock, and wakes the poll (here there is none, so the token waits).
	select {
	case <-st.queue.wake: // the offer of p's bucket
	default:
	}
	st.queue.lateAt.Store(0)
	before := int64(st.now())
	require.NoError(t, st.Add(newProbe(time.Hour)))
	assert.GreaterOrEqual(t, st.queue.lateAt.Load(), before+int64(nudgeAfter), "late: the Add nudged")
	assert.Len(t, st.queue.wake, 1)

	mt := NewMock()
	t.Cleanup(func() { _ = mt.Close() })
	require.NoError(t, mt.Add(newProbe(time.Millisecond)))
	mt.Advance(time.Hour)
	require.NoError(t, mt.Add(newProbe(time.Hour)))
	assert.Equal(t, int64(math.MaxInt64), mt.queue.lateAt.Load(), "a MockTimer is never late")
}

// AdvanceClock marks its goroutine as working while it runs, and nothing
// as late once it returns.
func TestAdvanceClockLeavesNothingLate(t *testing.T) {
	st := newTimer("nudge")
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Add(newProbe(time.Millisecond)))
	require.Eventually(t, func() bool { return st.AdvanceClock(10 * time.Millisecond) }, 10*time.Second, time.Millisecond)
	assert.Equal(t, int64(math.MaxInt64), st.queue.lateAt.Load())
}

// With one processor and a goroutine that only adds and cancels timeouts,
// the reaper's timer would run only when the scheduler preempts that
// goroutine, 10 ms or more after the bucket is due. The Adds nudge it
// instead: a task due in 7 ms runs within nudgeAfter and a tick of its
// deadline. It measures real time, so it is a benchmark, not a test: it
// reports the median lateness of 9 rounds (about 3 ms with nudges, above
// 12 ms without them), and a loaded machine moves the figure, not a
// verdict.
func BenchmarkBusyAdderExpiryLateness(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	st := newTimer("busy")
	reap(b, st)

	const delay = 7 * time.Millisecond
	var clk systemClock
	var late []time.Duration
	for range b.N {
		for range 9 {
			// Start with the reaper asleep in its wait, as it is in a
			// server that has been running.
			require.Eventually(b, st.queue.polling.Load, 10*time.Second, time.Millisecond)
			p := &stampTask{}
			p.SetDelay(delay)
			start := clk.Now()
			require.NoError(b, st.Add(p))
			for p.ran.Load() == 0 && clk.Now()-start < 5*time.Second {
				q := newProbe(time.Hour)
				require.NoError(b, st.Add(q))
				q.Cancel()
			}
			require.NotZero(b, p.ran.Load(), "the task ran")
			late = append(late, time.Duration(p.ran.Load())-start-delay)
		}
	}
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2])/1e6, "late-p50-ms")
}
