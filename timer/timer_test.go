package timer_test

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/timer"
)

// recorder is Kafka TimerTest's TestTask: it records its id once.
type recorder struct {
	timer.TaskBase
	id     int
	once   atomic.Bool
	mu     *sync.Mutex
	output *[]int
	done   chan struct{}
}

func newRecorder(delay time.Duration, id int, mu *sync.Mutex, out *[]int) *recorder {
	r := &recorder{id: id, mu: mu, output: out, done: make(chan struct{})}
	r.SetDelay(delay)
	return r
}

func (r *recorder) Run() {
	if r.once.CompareAndSwap(false, true) {
		r.mu.Lock()
		*r.output = append(*r.output, r.id)
		r.mu.Unlock()
		close(r.done)
	}
}

func newTimer(t *testing.T, opts ...timer.Option) *timer.SystemTimer {
	t.Helper()
	st, err := timer.NewSystemTimer(t.Name(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, st.Close()) })
	return st
}

func waitDone(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not done after 30s", what)
	}
}

// Reference: Kafka TimerTest.testAlreadyExpiredTask.
func TestAlreadyExpiredTasksRunAtOnce(t *testing.T) {
	st := newTimer(t, timer.WithWheelSize(3))
	var mu sync.Mutex
	var out []int
	var tasks []*recorder
	for i := -5; i < 0; i++ {
		r := newRecorder(time.Duration(i)*time.Millisecond, i, &mu, &out)
		require.NoError(t, st.Add(r))
		tasks = append(tasks, r)
	}
	// One AdvanceClock runs them all: they are due at once.
	for range 100 {
		if st.AdvanceClock(0) {
			break
		}
	}
	for _, r := range tasks {
		waitDone(t, r.done, "already expired task")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []int{-5, -4, -3, -2, -1}, out)
	assert.Equal(t, 0, st.Size())
}

// Reference: Kafka TimerTest.testTaskExpiration. With a wheel of 3 buckets
// delays up to 500ms span six levels; every task runs once.
func TestTaskExpirationAcrossLevels(t *testing.T) {
	st := newTimer(t, timer.WithWheelSize(3))
	var mu sync.Mutex
	var out, ids []int
	var tasks []*recorder
	add := func(delay, id int) {
		r := newRecorder(time.Duration(delay)*time.Millisecond, id, &mu, &out)
		tasks = append(tasks, r)
		ids = append(ids, id)
	}
	for i := range 5 {
		add(i, i)
	}
	for i := 10; i < 100; i++ {
		add(i, i)
		add(i, i)
	}
	for i := 100; i < 500; i++ {
		add(i, i)
	}
	for _, r := range tasks {
		require.NoError(t, st.Add(r))
	}
	for st.AdvanceClock(2 * time.Second) {
	}
	for _, r := range tasks {
		waitDone(t, r.done, "task")
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(out)
	assert.Equal(t, ids, out)
	assert.Equal(t, 0, st.Size())
}

// stamp records when it ran, on the package's clock.
type stamp struct {
	timer.TaskBase
	deadline time.Duration
	ranAt    atomic.Int64
	runs     atomic.Int32
	done     chan struct{}
}

func newStamp(d time.Duration) *stamp {
	s := &stamp{done: make(chan struct{})}
	s.SetDelay(d)
	s.deadline = timer.SystemClock{}.Now() + d
	return s
}

func (s *stamp) Run() {
	s.ranAt.Store(int64(timer.SystemClock{}.Now()))
	if s.runs.Add(1) == 1 {
		close(s.done)
	}
}

// A task never runs before its deadline on the real clock.
func TestNeverEarlyOnRealClock(t *testing.T) {
	r := timer.NewReaper("early", newTimer(t))
	defer r.Close()
	var tasks []*stamp
	for i := range 200 {
		s := newStamp(time.Duration(i%40) * 250 * time.Microsecond)
		tasks = append(tasks, s)
		require.NoError(t, r.Add(s))
	}
	for _, s := range tasks {
		waitDone(t, s.done, "stamp")
		assert.GreaterOrEqual(t, s.ranAt.Load(), int64(s.deadline), "ran early")
		assert.Equal(t, int32(1), s.runs.Load())
	}
}

func TestBadInput(t *testing.T) {
	t.Run("options are validated", func(t *testing.T) {
		cases := []struct {
			opt  timer.Option
			want error
		}{
			{timer.WithTick(0), timer.ErrInvalidOption},
			{timer.WithTick(-time.Millisecond), timer.ErrInvalidOption},
			{timer.WithWheelSize(0), timer.ErrInvalidOption},
			{timer.WithWheelSize(1), timer.ErrInvalidOption},
			{timer.WithWheelSize(4097), timer.ErrInvalidOption},
			{timer.WithExecutors(-1), timer.ErrInvalidOption},
			{timer.WithClock(nil), timer.ErrInvalidOption},
		}
		for _, c := range cases {
			st, err := timer.NewSystemTimer("bad", c.opt)
			assert.ErrorIs(t, err, c.want)
			assert.Nil(t, st)
		}
	})
	t.Run("the largest wheel size is accepted", func(t *testing.T) {
		st, err := timer.NewSystemTimer("max", timer.WithWheelSize(4096))
		require.NoError(t, err)
		require.NoError(t, st.Close())
	})
	t.Run("a nil task is refused", func(t *testing.T) {
		assert.ErrorIs(t, newTimer(t).Add(nil), timer.ErrNilTask)
		assert.ErrorIs(t, timer.NewMockTimer().Add(nil), timer.ErrNilTask)
		// A nil pointer of a task type panics, as any method call on it
		// would: telling it from a task would cost every Add a
		// reflection.
		var s *stamp
		assert.Panics(t, func() { _ = newTimer(t).Add(s) })
	})
	t.Run("Add after Close neither runs nor keeps the task", func(t *testing.T) {
		st, err := timer.NewSystemTimer("closed")
		require.NoError(t, err)
		require.NoError(t, st.Close())
		require.NoError(t, st.Close(), "Close is idempotent")
		s := newStamp(0)
		assert.ErrorIs(t, st.Add(s), timer.ErrClosed)
		assert.Equal(t, 0, st.Size())
		assert.False(t, st.AdvanceClock(0))
		assert.Equal(t, int32(0), s.runs.Load())
		assert.False(t, s.Cancel(), "the task was never pending")
	})
	t.Run("Close drops pending tasks and marks them cancelled", func(t *testing.T) {
		st, err := timer.NewSystemTimer("closing")
		require.NoError(t, err)
		s := newStamp(time.Hour)
		require.NoError(t, st.Add(s))
		require.Equal(t, 1, st.Size())
		require.NoError(t, st.Close())
		assert.Equal(t, 0, st.Size())
		assert.True(t, s.IsCancelled())
		assert.Equal(t, int32(0), s.runs.Load())
	})
	t.Run("NewReaper panics on a nil timer", func(t *testing.T) {
		assert.PanicsWithValue(t, "timer: NewReaper called with a nil Timer", func() {
			timer.NewReaper("nil", nil)
		})
	})
}

// panicker panics when it runs.
type panicker struct{ timer.TaskBase }

func (*panicker) Run() { panic("boom") }

// A panicking task is recovered and reported once; the timer goes on.
func TestPanickingTaskDoesNotStopTimer(t *testing.T) {
	reported := make(chan any, 1)
	st := newTimer(t, timer.WithPanicHandler(func(task timer.Task, v any) {
		_, ok := task.(*panicker)
		assert.True(t, ok)
		reported <- v
	}))
	r := timer.NewReaper("panics", st)
	t.Cleanup(func() { _ = r.Close() })
	require.NoError(t, st.Add(&panicker{}))
	select {
	case v := <-reported:
		assert.Equal(t, "boom", v)
	case <-time.After(30 * time.Second):
		t.Fatal("panic not reported")
	}
	s := newStamp(0)
	require.NoError(t, st.Add(s))
	waitDone(t, s.done, "task after a panic")
	assert.Empty(t, reported, "one panic, reported once")
}

// Reference: Kafka SystemTimerReaperTest.testReaper and
// testSharedTimerBetweenConsumers: tasks complete after their delays, and
// the timer keeps working for later tasks.
func TestReaperRunsTasks(t *testing.T) {
	st, err := timer.NewSystemTimer("reaped")
	require.NoError(t, err)
	r := timer.NewReaper("reaper", st)
	defer func() { require.NoError(t, r.Close()) }()
	first := []*stamp{newStamp(100 * time.Millisecond), newStamp(200 * time.Millisecond), newStamp(300 * time.Millisecond)}
	for _, s := range first {
		require.NoError(t, r.Add(s))
	}
	for _, s := range first {
		waitDone(t, s.done, "reaped task")
		assert.GreaterOrEqual(t, s.ranAt.Load(), int64(s.deadline))
	}
	late := newStamp(100 * time.Millisecond)
	require.NoError(t, r.Add(late))
	waitDone(t, late.done, "later task")
	assert.Equal(t, 0, r.Size())
}

// fakeTimer counts calls; AdvanceClock sleeps on the real clock as a
// user's timer might, since it cannot be woken.
type fakeTimer struct {
	advances atomic.Int32
	closes   atomic.Int32
}

func (f *fakeTimer) Add(timer.Task) error { return nil }
func (f *fakeTimer) Now() time.Duration   { return 0 }
func (f *fakeTimer) AdvanceClock(d time.Duration) bool {
	f.advances.Add(1)
	time.Sleep(time.Millisecond)
	return false
}
func (f *fakeTimer) Size() int    { return 0 }
func (f *fakeTimer) Close() error { f.closes.Add(1); return errors.New("closed fake") }

// Reference: Kafka SystemTimerReaperTest.testReaperClose: Close stops the
// goroutine (goleak checks) and closes the timer once.
func TestReaperCloseClosesTimerOnce(t *testing.T) {
	f := &fakeTimer{}
	r := timer.NewReaper("reaper", f)
	require.Eventually(t, func() bool { return f.advances.Load() > 0 }, 10*time.Second, time.Millisecond)
	assert.EqualError(t, r.Close(), "closed fake")
	assert.EqualError(t, r.Close(), "closed fake", "Close is idempotent")
	assert.Equal(t, int32(1), f.closes.Load())
}

// frozen is a Clock that never moves.
type frozen struct{}

func (frozen) Now() time.Duration { return 0 }
func (frozen) NewTimer(time.Duration) timer.ClockTimer {
	return stopped{make(chan time.Time)}
}

type stopped struct{ c chan time.Time }

func (s stopped) C() <-chan time.Time { return s.c }
func (stopped) Reset(time.Duration)   {}
func (stopped) Stop()                 {}

// Close wakes the reaper at once: on a clock that never moves, its
// AdvanceClock would otherwise wait for ever.
func TestReaperCloseWakesItAtOnce(t *testing.T) {
	st, err := timer.NewSystemTimer("frozen", timer.WithClock(frozen{}))
	require.NoError(t, err)
	r := timer.NewReaper("frozen", st)
	require.NoError(t, r.Add(newStamp(time.Hour)))
	closed := make(chan error)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		assert.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
}

// rearm adds itself again from inside Run until it has run n times.
type rearm struct {
	timer.TaskBase
	t    timer.Timer
	n    int32
	runs atomic.Int32
	done chan struct{}
}

func (r *rearm) Run() {
	if r.runs.Add(1) == r.n {
		close(r.done)
		return
	}
	if err := r.t.Add(r); err != nil {
		panic(err)
	}
}

// Regression: re-adding a task from inside its own Run.
func TestReAddFromInsideRun(t *testing.T) {
	for _, delay := range []time.Duration{0, 100 * time.Microsecond} {
		r := timer.NewReaper("rearm", newTimer(t, timer.WithTick(100*time.Microsecond)))
		task := &rearm{t: r, n: 50, done: make(chan struct{})}
		task.SetDelay(delay)
		require.NoError(t, r.Add(task))
		waitDone(t, task.done, "rearming task")
		assert.Equal(t, int32(50), task.runs.Load())
		require.NoError(t, r.Close())
	}
}

// Several goroutines add, re-add and cancel while the reaper expires.
// Each task runs at most once per Add; a task whose Cancel reported true
// does not run; every other task runs; Size ends at zero.
func TestConcurrentAddCancelWhileExpiring(t *testing.T) {
	st := newTimer(t, timer.WithTick(100*time.Microsecond), timer.WithWheelSize(8), timer.WithExecutors(2))
	r := timer.NewReaper("hammer", st)
	defer r.Close()
	const goroutines, perG = 4, 3000
	type entry struct {
		s         *stamp
		cancelled bool
	}
	all := make([][]entry, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			es := make([]entry, perG)
			for i := range es {
				s := newStamp(time.Duration(i%23) * 100 * time.Microsecond)
				es[i].s = s
				switch i % 5 {
				case 1: // move it: a second Add of a task still pending
					s.SetDelay(time.Hour)
					assert.NoError(t, r.Add(s))
					s.SetDelay(time.Duration(i%7) * 100 * time.Microsecond)
					assert.NoError(t, r.Add(s))
				case 2: // cancel a plain task added just before, racing its expiry
					assert.NoError(t, r.Add(s))
					es[i-2].cancelled = es[i-2].s.Cancel()
				default:
					assert.NoError(t, r.Add(s))
				}
			}
			all[g] = es
		}()
	}
	wg.Wait()
	for _, es := range all {
		for _, e := range es {
			if e.cancelled {
				continue
			}
			waitDone(t, e.s.done, "uncancelled task")
		}
	}
	require.Eventually(t, func() bool { return r.Size() == 0 }, 30*time.Second, time.Millisecond)
	for _, es := range all {
		for _, e := range es {
			if e.cancelled {
				assert.Equal(t, int32(0), e.s.runs.Load(), "a task whose Cancel returned true ran")
			} else {
				assert.Equal(t, int32(1), e.s.runs.Load())
			}
		}
	}
}

// TaskBase stays at 64 bytes: one size class, and the heap target.
func TestTaskBaseIs64Bytes(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(timer.TaskBase{}))
}
