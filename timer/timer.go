package timer

import (
	"time"

	"github.com/purgatory-go/purgatory/internal/core"
)

// Timer runs tasks after their delays.
type Timer interface {
	// Add schedules task to run once its delay has elapsed, measured from
	// Now. A delay of zero or less makes it due at once. Adding a task that
	// is already pending moves it to the new deadline; it is counted once.
	// After Close, Add returns ErrClosed and neither runs nor keeps the task.
	//
	// A task that has been taken to run is no longer pending: an Add
	// schedules it again, and the Run already taken still comes. To move a
	// task and know whether its old deadline's Run was stopped, reset it
	// (see [TaskBase.SetDelay]):
	//
	//	stopped := task.Cancel() // true: the old deadline's Run will not come
	//	task.SetDelay(d)
	//	err := tm.Add(task)
	//
	// Add never runs the task itself: a due task runs on whatever advances
	// the timer (AdvanceClock, a Reaper, a MockTimer's Advance). A
	// purgatory adds timeouts while holding the operation's lock, which
	// the expiry takes, so an implementation that ran a due task inside Add
	// would deadlock there.
	Add(task Task) error

	// Now reads the clock the timer measures deadlines on: a monotonic
	// duration from an origin of the timer's choosing. A purgatory reads
	// it to time an operation's stay.
	Now() time.Duration

	// AdvanceClock waits up to timeout for the earliest bucket of tasks to be
	// due, then expires every due task. It reports whether it expired any
	// bucket (true) or returned because the timeout passed or the timer was
	// closed or woken (false).
	AdvanceClock(timeout time.Duration) bool

	// Size reports the number of pending tasks.
	Size() int

	// Close stops the timer. Pending tasks are dropped without running and
	// marked cancelled; tasks already handed to the executor still run, and
	// Close waits for them. Close is idempotent.
	Close() error
}

// waker is implemented by this package's timers so that a Reaper can cut
// short an AdvanceClock in progress.
type waker interface{ wake() }

// SystemTimer is Kafka's SystemTimer: hierarchical timing wheels whose
// buckets wait in a delay queue. Add and Cancel are O(1) in the number of
// pending tasks (Add is O(number of levels)); AdvanceClock moves the wheels
// only when a bucket is due.
//
// Nothing advances a SystemTimer by itself: wrap it in a [Reaper], or call
// AdvanceClock in a loop.
//
// A SystemTimer is safe for concurrent use by multiple goroutines. Add calls
// run in parallel with each other (they share a read lock) and with Cancel
// (which takes only the bucket's lock); AdvanceClock excludes Add while it
// moves the wheels. Expired tasks run on executor goroutines, never under a
// timer lock, so a task may Add itself or others again.
type SystemTimer struct {
	c *core.Timer
	engine
}

// engine ties a timer of this package to its engine (core.TimerOf); it
// promotes no method a user can see.
type engine = core.Link

var _ Timer = (*SystemTimer)(nil)

// NewSystemTimer returns a timer with a 1ms tick and 20-bucket wheels unless
// options say otherwise, and starts its executor goroutines. The name appears
// in logs. Close the timer to stop them.
func NewSystemTimer(name string, opts ...Option) (*SystemTimer, error) {
	c := defaultConfig()
	for _, o := range opts {
		o.apply(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	st := &SystemTimer{c: core.New(c.core(name))}
	st.engine = core.LinkTo(st, st.c)
	return st, nil
}

// Now implements [Timer]: it reads the timer's clock (WithClock, by
// default SystemClock), on which its deadlines are measured.
func (t *SystemTimer) Now() time.Duration { return t.c.Now() }

// Add implements [Timer]. It never blocks on AdvanceClock for longer than one
// flush takes, and it never runs a task: one that is due already (a delay
// of zero or less, or a deadline inside the current tick) goes into the
// bucket of the current tick, which is due at once, and runs on the
// goroutine that advances the timer, as every other task does. A caller
// may therefore Add while holding a lock that the task's Run takes.
//
// An Add that finds the goroutine advancing the clock more than 2 ms behind
// its clock (asleep past a due bucket, or in one AdvanceClock for that
// long) wakes it and yields the processor once (runtime.Gosched): on a
// machine whose processors are all busy, a loop that adds tasks would
// otherwise hold off the expiries until the runtime preempts it. At most
// one Add does so every 2 ms.
func (t *SystemTimer) Add(task Task) error {
	if task == nil {
		return ErrNilTask
	}
	return t.c.Add(task)
}

// AdvanceClock implements [Timer]. While coarse buckets are being moved down
// ahead of time it does not wait: each call moves a chunk of entries (after
// expiring whatever is due) and returns true, so that a Reaper keeps
// calling it until the work is done.
func (t *SystemTimer) AdvanceClock(timeout time.Duration) bool { return t.c.AdvanceClock(timeout) }

// Size implements [Timer]. It sums the buckets' counts of linked tasks,
// each read under its stripe's lock, and counts the timeouts of package
// purgatory's operations one by one, since cancelling one clears its slot
// without counting: its cost grows with the operations' timeouts held
// (about 25 ms for a million, on a 2-core machine), and it holds off
// expiry while it counts. It is for tests and occasional checks: for a
// purgatory's metric use its NumDelayed or Stats, which are counters.
// While a bucket is being flushed its entries are briefly not counted, as
// in Kafka.
func (t *SystemTimer) Size() int { return t.c.Size() }

// Close implements [Timer].
func (t *SystemTimer) Close() error { return t.c.Close() }

func (t *SystemTimer) wake() { t.c.Wake() }
