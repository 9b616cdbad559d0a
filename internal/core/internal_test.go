package core

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ran counts a test task's runs and, with a clock, when the last was.
type ran struct {
	runs atomic.Int32
	at   time.Duration // clock time of the last run
	clk  Clock
}

func (r *ran) Run() {
	r.runs.Add(1)
	if r.clk != nil {
		r.at = r.clk.Now()
	}
}

// probe is a task that embeds its entry's holder, as a timer.TaskBase
// task does.
type probe struct {
	taskBase
	ran
}

func newProbe(d time.Duration) *probe {
	p := &probe{}
	p.SetDelay(d)
	return p
}

// addProbes adds n tasks of delay d to st, each recording on clk (if not
// nil) when it ran.
func addProbes(t *testing.T, st *Timer, clk Clock, n int, d time.Duration) []*probe {
	t.Helper()
	ps := make([]*probe, n)
	for i := range ps {
		ps[i] = newProbe(d)
		ps[i].clk = clk
		require.NoError(t, st.Add(ps[i]))
	}
	return ps
}

// newInlineTimer returns a timer on a mock clock that runs expired tasks on
// the goroutine that advances it, so tests can check exactly what ran.
func newInlineTimer(t testing.TB, opts ...option) (*Timer, *MockClock) {
	t.Helper()
	clk := NewMockClock()
	st := newTimer("test", append([]option{withClock(clk), inlineExecution()}, opts...)...)
	t.Cleanup(func() { _ = st.Close() })
	testTimers.Lock()
	testTimers.all = append(testTimers.all, st)
	testTimers.Unlock()
	t.Cleanup(func() {
		testTimers.Lock()
		testTimers.all = slices.DeleteFunc(testTimers.all, func(x *Timer) bool { return x == st })
		testTimers.Unlock()
	})
	return st, clk
}

// testTimers are the timers newInlineTimer made, for bucketOf.
var testTimers struct {
	sync.Mutex
	all []*Timer
}

func (t *Timer) runDue() {
	for t.AdvanceDue() {
	}
}

// bucketOf returns the bucket e is linked into, or nil.
func bucketOf(e Sealed) *bucket {
	te := e.mustEmbedTaskBase()
	if !te.Linked() {
		return nil
	}
	testTimers.Lock()
	defer testTimers.Unlock()
	var found *bucket
	for _, st := range testTimers.all {
		st.wheel.levels(func(w *wheel) {
			for i := range w.buckets {
				if w.buckets[i].holds(te) {
					found = &w.buckets[i]
				}
			}
		})
	}
	return found
}

// Reference: Kafka TimerTaskListTest.testAll. Moving tasks between buckets
// keeps the timer's count; cancelling empties the buckets.
func TestBucketMovesKeepCountAndCancelEmpties(t *testing.T) {
	st, _ := newInlineTimer(t, withWheelSize(20))
	tasks := make([]*probe, 10)
	for i := range tasks {
		tasks[i] = newProbe(10 * time.Millisecond)
		require.NoError(t, st.Add(tasks[i]))
		assert.Equal(t, i+1, st.Size())
	}
	list1 := bucketOf(tasks[0])
	require.NotNil(t, list1)

	// Re-adding a pending task moves it and does not change the count.
	for _, p := range tasks[:4] {
		p.SetDelay(11 * time.Millisecond)
		require.NoError(t, st.Add(p))
		assert.Equal(t, 10, st.Size())
	}
	list2 := bucketOf(tasks[0])
	require.NotSame(t, list1, list2)
	assert.Equal(t, 6, list1.len())
	assert.Equal(t, 4, list2.len())

	for _, p := range tasks[4:] {
		p.SetDelay(12 * time.Millisecond)
		require.NoError(t, st.Add(p))
		assert.Equal(t, 10, st.Size())
	}
	list3 := bucketOf(tasks[4])
	assert.Equal(t, 0, list1.len())
	assert.Equal(t, 4, list2.len())
	assert.Equal(t, 6, list3.len())

	for _, p := range tasks[:4] {
		assert.True(t, p.Cancel())
	}
	assert.Equal(t, 0, list2.len())
	assert.Equal(t, 6, list3.len())
	for _, p := range tasks[4:] {
		assert.True(t, p.Cancel())
		assert.False(t, p.Cancel(), "a second Cancel prevents nothing")
	}
	assert.Equal(t, 0, list3.len())
	assert.Equal(t, 0, st.Size())
	for _, p := range tasks {
		assert.True(t, p.IsCancelled())
	}
}

// flush walks the stripes side by side. Whatever the stripes hold (here one
// emptied by cancels and the others uneven), it takes every entry exactly
// once, leaves each unlinked, and leaves every stripe empty with a count of
// zero.
func TestFlushTakesEveryStripe(t *testing.T) {
	t.Parallel()
	st, _ := newInlineTimer(t)
	tasks := make([]*probe, 40)
	for i := range tasks {
		tasks[i] = newProbe(10 * time.Millisecond)
		require.NoError(t, st.Add(tasks[i]))
	}
	b := bucketOf(tasks[0])
	require.NotNil(t, b)
	emptied := b.stripeOf(tasks[0].entry())
	want := map[*Entry]bool{}
	perStripe := map[*List]int{}
	for _, p := range tasks {
		require.Same(t, b, bucketOf(p), "one bucket")
		if s := b.stripeOf(p.entry()); s == emptied {
			require.True(t, p.Cancel())
		} else {
			want[p.entry()] = true
			perStripe[s]++
		}
	}
	require.Len(t, perStripe, bucketStripes-1, "the other stripes all hold entries")

	got := b.flush(nil)
	assert.Len(t, got, len(want))
	for _, e := range got {
		assert.True(t, want[e], "taken once, and only what was linked")
		delete(want, e)
		assert.False(t, e.Linked())
	}
	for i := range b.stripes {
		s := &b.stripes[i]
		n, err := s.Walk(nil)
		assert.NoError(t, err)
		assert.Zero(t, n)
		assert.Zero(t, s.Count())
	}
	assert.Equal(t, int64(-1), b.expiration.Load())
}

// flush takes its four stripe locks one after another. Run exactly between
// two of them (stripes 0 and 1 taken, stripe 2 held by the test): a Cancel
// of an entry in stripe 3, which the flush has not reached, wins and is
// not taken; a Cancel in stripe 0, which the flush holds, waits for the
// flush, and its entry is taken but no longer pending, so refiling skips
// it.
func TestCancelBetweenTheFlushLocks(t *testing.T) {
	t.Parallel()
	st, _ := newInlineTimer(t)
	b := (*bucket)(nil)
	byStripe := map[int][]*probe{}
	for len(byStripe[0]) == 0 || len(byStripe[3]) == 0 {
		p := newProbe(10 * time.Millisecond)
		require.NoError(t, st.Add(p))
		if b == nil {
			b = bucketOf(p)
		}
		require.Same(t, b, bucketOf(p))
		for i := range b.stripes {
			if b.stripeOf(p.entry()) == &b.stripes[i] {
				byStripe[i] = append(byStripe[i], p)
			}
		}
	}
	total := 0
	for _, ps := range byStripe {
		total += len(ps)
	}

	b.stripes[2].Lock()
	got := make(chan []*Entry, 1)
	go func() { got <- b.flush(nil) }()
	require.Eventually(t, func() bool {
		if b.stripes[1].TryLock() {
			b.stripes[1].Unlock()
			return false
		}
		return true
	}, 10*time.Second, time.Millisecond, "the flush holds stripes 0 and 1")

	late := byStripe[3][0]
	assert.True(t, late.Cancel(), "stripe 3 is not the flush's yet: the Cancel wins")
	assert.Nil(t, bucketOf(late))
	held := byStripe[0][0]
	cancelled := make(chan bool, 1)
	go func() { cancelled <- held.Cancel() }()
	b.stripes[2].Unlock()

	taken := <-got
	assert.Len(t, taken, total-1)
	assert.False(t, slices.Contains(taken, late.entry()), "the cancelled entry is not taken")
	assert.True(t, slices.Contains(taken, held.entry()))
	assert.True(t, <-cancelled, "the Cancel in stripe 0 waited for the flush, and won")
	assert.False(t, held.entry().IsPending(), "refiling skips it")
	for i := range b.stripes {
		assert.Zero(t, b.stripes[i].Count())
	}
}

// A bucket is reused for a later span once flushed, and the delay queue
// gets it again only then.
func TestBucketReuseResetsExpiration(t *testing.T) {
	st, clk := newInlineTimer(t, withWheelSize(4))
	p := newProbe(2 * time.Millisecond)
	require.NoError(t, st.Add(p))
	b := bucketOf(p)
	first := b.expiration.Load()
	assert.Equal(t, int64(2), first)
	assert.Equal(t, 1, st.queue.len())

	clk.Advance(2 * time.Millisecond)
	st.runDue()
	assert.Equal(t, int32(1), p.runs.Load())
	assert.Equal(t, int64(-1), b.expiration.Load(), "a flushed bucket waits for reuse")

	// With a wheel size of 4 the finest level has 8 buckets, so at tick 3 a
	// deadline of tick 10 maps to the same slot: the next round. A one-tick
	// bucket is queued first, so that the wheel advances to 3.
	require.NoError(t, st.Add(newProbe(time.Millisecond)))
	clk.Advance(time.Millisecond)
	st.runDue()
	q := newProbe(7 * time.Millisecond)
	require.NoError(t, st.Add(q))
	assert.Same(t, b, bucketOf(q))
	assert.Equal(t, int64(10), b.expiration.Load())
	assert.Equal(t, 1, st.queue.len())
}

// The delay queue orders buckets by expiration, wakes a sleeping poll when
// an earlier bucket arrives, and returns false on timeout or once stopped.
func TestDelayQueue(t *testing.T) {
	clk := NewMockClock()
	q := newDelayQueue(clk.Now, clk, time.Millisecond)
	mk := func(exp int64) *bucket {
		b := &bucket{}
		b.init()
		b.expiration.Store(exp)
		return b
	}
	b5, b3, b9 := mk(5), mk(3), mk(9)
	q.offer(b5)
	q.offer(b9)
	q.offer(b3)
	assert.Nil(t, q.pollDue(2*time.Millisecond))
	assert.Same(t, b3, q.pollDue(3*time.Millisecond))

	t.Run("a poll times out on the clock", func(t *testing.T) {
		got := make(chan bool)
		go func() { got <- q.wait(time.Millisecond) }()
		waitTimers(t, clk)
		clk.Advance(time.Millisecond) // now 1ms: nothing due, timeout reached
		assert.False(t, <-got)
	})

	t.Run("an earlier bucket wakes a poll", func(t *testing.T) {
		got := make(chan bool)
		go func() { got <- q.wait(time.Hour) }()
		waitTimers(t, clk)
		b2 := mk(2)
		q.offer(b2)
		clk.Advance(time.Millisecond) // now 2ms: b2 is due; b5 is not
		assert.True(t, <-got)
		assert.Same(t, b2, q.pollDue(clk.Now()))
	})

	t.Run("stop interrupts a poll", func(t *testing.T) {
		got := make(chan bool)
		go func() { got <- q.wait(time.Hour) }()
		waitTimers(t, clk)
		q.stop()
		assert.False(t, <-got)
	})

	// A closed channel, not a token: a stop that came before the wait
	// (issue 43: a Reaper's Close before its loop entered the wait) is
	// not lost, nor used up by the wait it ended.
	t.Run("after stop no wait sleeps", func(t *testing.T) {
		assert.False(t, q.wait(time.Hour))
		assert.False(t, q.wait(time.Hour))
		q.stop() // idempotent
		assert.Zero(t, clk.Armed(), "no timer was set")
	})

	clk.Advance(10 * time.Millisecond)
	assert.Same(t, b5, q.pollDue(clk.Now()))
	assert.Same(t, b9, q.pollDue(clk.Now()))
	assert.Nil(t, q.pollDue(clk.Now()))
}

// waitTimers waits until a goroutine sleeps on one of clk's timers.
func waitTimers(t *testing.T, clk *MockClock) {
	t.Helper()
	require.Eventually(t, func() bool {
		clk.mu.Lock()
		defer clk.mu.Unlock()
		return len(clk.timers) > 0
	}, 10*time.Second, time.Millisecond)
}

// Regression: a flush racing with Adds to the same bucket. Every task runs
// exactly once and none is lost. Adds to one bucket from several goroutines
// while the wheels advance under them on a real clock with a tiny tick.
func TestFlushRacingAddsToSameBucket(t *testing.T) {
	st := newTimer("race", withTick(50*time.Microsecond), withWheelSize(4))
	reap(t, st)

	const goroutines, perG = 4, 2000
	var ran atomic.Int64
	tasks := make([][]counted, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		tasks[g] = make([]counted, perG)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tasks[g] {
				c := &tasks[g][i]
				c.n = &ran
				c.SetDelay(time.Duration(i%3) * 50 * time.Microsecond) // 0, 1 or 2 ticks
				assert.NoError(t, st.Add(c))
			}
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool { return ran.Load() == goroutines*perG },
		30*time.Second, time.Millisecond)
	for g := range tasks {
		for i := range tasks[g] {
			assert.Equal(t, int32(1), tasks[g][i].runs.Load())
		}
	}
	assert.Equal(t, 0, st.Size())
}

type counted struct {
	taskBase
	runs atomic.Int32
	n    *atomic.Int64
}

func (c *counted) Run() {
	c.runs.Add(1)
	c.n.Add(1)
}

// Regression: reading the wheels' current time while they advance. The
// wheels are read only under the timer's lock; the race detector checks.
func TestReadCurrentTimeWhileAdvancing(t *testing.T) {
	st, clk := newInlineTimer(t, withWheelSize(3))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := int64(-1)
		for {
			select {
			case <-done:
				return
			default:
			}
			c := st.currentTick()
			assert.GreaterOrEqual(t, c, last, "the wheel's time never goes back")
			last = c
			_ = st.Size()
		}
	}()
	for i := range 2000 {
		require.NoError(t, st.Add(newProbe(time.Duration(i%50)*time.Millisecond)))
		clk.Advance(time.Millisecond)
		st.runDue()
	}
	close(done)
	wg.Wait()
}

func (t *Timer) currentTick() int64 {
	mu := &t.mu[0]
	mu.RLock()
	defer mu.RUnlock()
	return t.wheel.current
}

// Entries sit in the level their deadline calls for. With a wheel size of
// 3, a level has 6 buckets and the next level's tick is 3 of its own: level
// 0 reaches 6 ticks ahead, level 1 (tick 3) 18, level 2 (tick 9) 54.
func TestOverflowLevels(t *testing.T) {
	st, _ := newInlineTimer(t, withWheelSize(3))
	cases := []struct {
		delay time.Duration
		tick  int64 // the level's tick the entry must land in
	}{
		{1 * time.Millisecond, 1},
		{5 * time.Millisecond, 1},
		{6 * time.Millisecond, 3},
		{17 * time.Millisecond, 3},
		{18 * time.Millisecond, 9},
		{53 * time.Millisecond, 9},
		{54 * time.Millisecond, 27},
	}
	for _, c := range cases {
		p := newProbe(c.delay)
		require.NoError(t, st.Add(p))
		b := bucketOf(p)
		found := false
		st.wheel.levels(func(w *wheel) {
			for i := range w.buckets {
				if &w.buckets[i] == b {
					found = true
					assert.Equal(t, c.tick, w.tick, "delay %v", c.delay)
				}
			}
		})
		assert.True(t, found, "delay %v not in any bucket", c.delay)
	}
}

// Deadlines far in the future saturate instead of overflowing, and such a
// task stays pending and cancellable.
func TestHugeDelaySaturates(t *testing.T) {
	st, clk := newInlineTimer(t)
	p := newProbe(time.Duration(1<<63 - 1))
	require.NoError(t, st.Add(p))
	assert.Equal(t, 1, st.Size())
	clk.Advance(1000 * time.Hour)
	st.runDue()
	assert.Equal(t, int32(0), p.runs.Load())
	assert.True(t, p.Cancel())
	assert.Equal(t, 0, st.Size())
}

// A bucket is the 640 bytes package timer's WithWheelSize documents, and
// a timer of the largest wheel size it accepts can be made.
func TestBucketSizeAsDocumented(t *testing.T) {
	assert.Equal(t, uintptr(640), unsafe.Sizeof(bucket{}))
	st := newTimer("max", withWheelSize(4096))
	st.Close()
}

// A task handed to the executor after Close still runs: it has fired, so
// Cancel can no longer stop it, and dropping it would lose it silently.
func TestSubmitAfterCloseRunsTask(t *testing.T) {
	st := newTimer("late")
	require.NoError(t, st.Close())
	p := newProbe(0)
	p.entry().Owner = p // as its first Add would
	st.exec.submit(expiry{task: p.entry()})
	assert.Equal(t, int32(1), p.runs.Load())
}

// AdvanceClock on a closed timer returns false at once instead of waiting
// out its timeout.
func TestAdvanceClockAfterCloseReturnsAtOnce(t *testing.T) {
	st := newTimer("closed")
	require.NoError(t, st.Close())
	start := time.Now()
	for range 5 {
		assert.False(t, st.AdvanceClock(time.Hour))
	}
	assert.Less(t, time.Since(start), 30*time.Second, "AdvanceClock waited for its timeout")
}

// Stripes share no cache line, and in the wheel's array (which the
// allocator may start 8 bytes into a line, after its type header) what a
// link or an unlink writes in each stripe is in one line.
func TestStripeLayout(t *testing.T) {
	assert.Equal(t, uintptr(128), unsafe.Sizeof(List{}))
	for _, n := range []int{20, 64} { // a small array and a large one
		st := newTimer("aligned", withWheelSize(n))
		hot := hotEnd()
		for i := range st.wheel.buckets {
			for j := range st.wheel.buckets[i].stripes {
				addr := uintptr(unsafe.Pointer(&st.wheel.buckets[i].stripes[j]))
				require.Equal(t, addr/64, (addr+hot-1)/64, "bucket %d stripe %d: hot fields in one line", i, j)
			}
		}
		st.Close()
	}
}

// A Cancel between taking entries out of a bucket and refiling them (they
// are pending and in no bucket) wins: the task does not run, Cancel reports
// that it prevented the run, nothing is left counted, and the others run on
// time. Entries leave a due bucket all at once, and a coarser bucket moving
// down in batches, before they are due.
func TestCancelBetweenTakingOutAndRefiling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		delay  time.Duration
		coarse bool // the tasks start in a coarser level, and move down
	}{
		{"due", 5 * time.Millisecond, false},
		{"moving down", 100 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, clk := newInlineTimer(t, withWheelSize(20))
			tasks := addProbes(t, st, clk, 3, tc.delay)
			require.Equal(t, tc.coarse, bucketOf(tasks[1]).lead > 0)
			var cancelled, seen bool
			st.hooks = &hooks{flushed: func(batch []*Entry) {
				if seen {
					return
				}
				seen = true
				require.Len(t, batch, 3)
				require.Nil(t, bucketOf(tasks[1]), "entries taken out are in no bucket")
				require.True(t, tasks[1].entry().IsPending())
				cancelled = tasks[1].Cancel()
			}}
			clk.Advance(tc.delay)
			st.runDue()
			require.True(t, seen)
			assert.True(t, cancelled, "the Cancel prevented a pending run")
			assert.Equal(t, []int32{1, 0, 1}, []int32{tasks[0].runs.Load(), tasks[1].runs.Load(), tasks[2].runs.Load()})
			assert.Equal(t, tc.delay, tasks[0].at)
			assert.Equal(t, 0, st.Size())
			fired, _ := st.Counts()
			assert.Equal(t, uint64(2), fired)
		})
	}
}

// linked walks every list of st, checking each link both ways, and returns
// how many times each entry is linked.
func linked(t *testing.T, st *Timer) map[*Entry]int {
	t.Helper()
	seen := map[*Entry]int{}
	st.wheel.levels(func(w *wheel) {
		for i := range w.buckets {
			for j := range w.buckets[i].stripes {
				_, err := w.buckets[i].stripes[j].Walk(func(e *Entry) { seen[e]++ })
				require.NoError(t, err, "bucket %d stripe %d", i, j)
			}
		}
	})
	return seen
}

// Only a holder of a task's addLock links it: an Add, or the reaper
// refiling it one level down. Two timers then never link one entry at
// once, whatever runs between the reaper taking the entry out of a coarse
// bucket and refiling it:
//   - an Add of it to another timer that has finished: the entry stays
//     where that Add put it, and the first timer neither links nor runs it;
//   - an Add of it to another timer still under way (holding addLock): the
//     reaper leaves it to that Add.
func TestAddToAnotherTimerBetweenTakingOutAndRefiling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		finished bool // the other timer's Add is over before the refile
	}{
		{"finished", true},
		{"under way", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const delay = 100 * time.Millisecond
			a, clkA := newInlineTimer(t, withWheelSize(20))
			b, clkB := newInlineTimer(t, withWheelSize(20))
			tasks := addProbes(t, a, nil, 3, delay)
			require.Positive(t, bucketOf(tasks[1]).lead, "the tasks start in a coarser level")
			moved := tasks[1].entry()
			var seen bool
			a.hooks = &hooks{flushed: func(batch []*Entry) {
				if seen {
					return
				}
				seen = true
				require.Contains(t, batch, moved)
				require.Nil(t, bucketOf(tasks[1]))
				if tc.finished {
					require.NoError(t, b.Add(tasks[1]))
					require.Equal(t, 1, linked(t, b)[moved])
				} else {
					moved.State.Or(addLockBit) // as an Add holds it
				}
			}}
			clkA.Advance(delay - 10*time.Millisecond) // a coarse bucket is taken a span early
			a.runDue()
			require.True(t, seen)

			inA := linked(t, a)
			assert.Zero(t, inA[moved], "the first timer linked an entry it does not own")
			assert.Equal(t, 1, inA[tasks[0].entry()])
			assert.Equal(t, 1, inA[tasks[2].entry()])
			assert.Equal(t, 2, a.Size())
			if !tc.finished {
				require.Nil(t, bucketOf(tasks[1]), "left to the Add under way")
				moved.State.And(^addLockBit)
				require.NoError(t, b.Add(tasks[1]))
			}
			assert.Equal(t, 1, linked(t, b)[moved])
			assert.Equal(t, 1, b.Size())

			clkA.Advance(delay)
			a.runDue()
			assert.Equal(t, []int32{1, 0, 1}, []int32{tasks[0].runs.Load(), tasks[1].runs.Load(), tasks[2].runs.Load()})
			assert.Equal(t, 0, a.Size())
			clkB.Advance(2 * delay)
			b.runDue()
			assert.Equal(t, int32(1), tasks[1].runs.Load())
			assert.Equal(t, 0, b.Size())
		})
	}
}

// Tasks moving between two timers while both advance: each writer adds its
// own tasks to either timer at random, with short delays on small wheels,
// so that entries are often between buckets in one timer's refile when an
// Add takes them to the other. Whatever interleaving the scheduler finds,
// every list stays sound, and once everything is cancelled and both
// clocks have run far ahead, nothing is left linked or counted.
func TestTasksMovingBetweenTimersKeepListsSound(t *testing.T) {
	t.Parallel()
	a, clkA := newInlineTimer(t, withWheelSize(4))
	b, clkB := newInlineTimer(t, withWheelSize(4))
	timers := []*Timer{a, b}
	clocked := []struct {
		st  *Timer
		clk *MockClock
	}{{a, clkA}, {b, clkB}}
	const writers, perWriter, rounds = 2, 32, 4000
	tasks := make([]*probe, writers*perWriter)
	for i := range tasks {
		tasks[i] = newProbe(0)
	}
	var wg sync.WaitGroup
	var stop atomic.Bool
	for _, tc := range clocked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				tc.clk.Advance(time.Millisecond)
				tc.st.runDue()
			}
		}()
	}
	var adders sync.WaitGroup
	for w := range writers {
		adders.Add(1)
		go func() {
			defer adders.Done()
			mine := tasks[w*perWriter : (w+1)*perWriter]
			seed := uint64(w + 1)
			for range rounds {
				seed = seed*6364136223846793005 + 1442695040888963407
				p := mine[seed>>40%perWriter]
				if seed>>20%4 == 0 {
					p.Cancel()
					continue
				}
				p.SetDelay(time.Duration(seed>>8%64) * time.Millisecond)
				assert.NoError(t, timers[seed>>32%2].Add(p))
			}
		}()
	}
	adders.Wait()
	stop.Store(true)
	wg.Wait()

	for _, p := range tasks {
		p.Cancel()
	}
	for _, tc := range clocked {
		tc.clk.Advance(time.Hour)
		tc.st.runDue()
		assert.Empty(t, linked(t, tc.st))
		assert.Equal(t, 0, tc.st.Size())
	}
}

// The reaper refiles an entry moving down in steps, holding its add-lock:
// take the lock, link the entry one level finer, let go. A Cancel between
// taking the lock and linking wins and the entry is not linked; a Cancel
// after the link wins too, and the entry leaves the bucket when the
// reaper lets go of the lock. Either way the task never runs and nothing
// stays counted, while its neighbours run on time.
func TestCancelBetweenTheRefileSteps(t *testing.T) {
	t.Parallel()
	for _, linkedFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "before the link", true: "after the link"}[linkedFirst], func(t *testing.T) {
			const delay = 100 * time.Millisecond
			st, clk := newInlineTimer(t, withWheelSize(20))
			tasks := addProbes(t, st, clk, 3, delay)
			require.Positive(t, bucketOf(tasks[1]).lead, "the tasks start in a coarser level")
			target := tasks[1].entry()
			var cancelled, seen bool
			st.hooks = &hooks{refile: func(e *Entry, linked bool) {
				if e != target || linked != linkedFirst {
					return
				}
				seen = true
				require.NotZero(t, e.State.Load()&addLockBit, "the reaper holds the add-lock")
				if linked {
					require.NotNil(t, bucketOf(tasks[1]))
				} else {
					require.Nil(t, bucketOf(tasks[1]))
				}
				cancelled = tasks[1].Cancel()
				// The holder of the add-lock unlinks a cancelled entry
				// as it lets go (Entry.Cancel): no link made before or
				// after the Cancel survives it.
			}}
			clk.Advance(delay - 10*time.Millisecond) // the coarse bucket moves down
			st.runDue()
			require.True(t, seen)
			assert.True(t, cancelled, "the Cancel prevented a pending run")
			assert.Zero(t, target.State.Load()&addLockBit, "the add-lock is let go")
			assert.Zero(t, linked(t, st)[target])
			assert.Equal(t, 2, st.Size())

			clk.Advance(10 * time.Millisecond)
			st.runDue()
			assert.Equal(t, []int32{1, 0, 1}, []int32{tasks[0].runs.Load(), tasks[1].runs.Load(), tasks[2].runs.Load()})
			assert.Equal(t, delay, tasks[0].at)
			assert.Equal(t, 0, st.Size())
		})
	}
}
