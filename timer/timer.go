package timer

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Timer runs tasks after their delays.
type Timer interface {
	// Add schedules task to run once its delay has elapsed, measured from
	// now. A delay of zero or less runs it at once. Adding a task that is
	// already pending moves it to the new deadline; it is counted once.
	// After Close, Add returns ErrClosed and neither runs nor keeps the task.
	Add(task Task) error

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
	name  string
	clock Clock
	tick  int64 // nanoseconds per tick
	sys   bool  // clock is SystemClock: skip the interface call on the hot path

	// mu is held for reading by Add (one stripe) and for writing (every
	// stripe) while the wheels advance and while closing. Lock order: mu,
	// then a bucket's mu, then the delay queue's mu.
	mu      lockShards
	wheel   *wheel      // finest level; coarser ones hang off it
	closed  bool        // guarded by mu
	flushed []*TaskBase // scratch for flushes, guarded by mu (write)
	expired []Task      // expired tasks of one AdvanceClock, guarded by mu (write)

	pollMu sync.Mutex // one poller of the delay queue at a time
	queue  *delayQueue

	fired  atomic.Uint64
	panics atomic.Uint64

	exec    *executor // nil when tasks run inline (MockTimer)
	onPanic func(Task, any)
	logger  *slog.Logger
}

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
	t := &SystemTimer{
		name:    name,
		clock:   c.clock,
		tick:    int64(c.tick),
		onPanic: c.onPanic,
		logger:  c.logger,
	}
	_, t.sys = c.clock.(SystemClock)
	if t.logger == nil {
		t.logger = slog.Default()
	}
	t.queue = newDelayQueue(c.clock, c.tick)
	t.wheel = newWheel(1, c.wheelSize, t.nowTick(), t.queue)
	if !c.inline {
		t.exec = newExecutor(c.executors, t.runTask)
	}
	return t, nil
}

// Name returns the name the timer was created with.
func (t *SystemTimer) Name() string { return t.name }

func (t *SystemTimer) now() time.Duration {
	if t.sys {
		return time.Since(epoch)
	}
	return t.clock.Now()
}

func (t *SystemTimer) nowTick() int64 { return int64(t.now()) / t.tick }

// deadlineTick returns the first tick that starts at or after now+delay: a
// task due inside a tick waits for the end of that tick, so it is never early.
func (t *SystemTimer) deadlineTick(delay time.Duration) int64 {
	now := int64(t.now())
	if delay <= 0 {
		return now / t.tick
	}
	d := int64(delay)
	if d > math.MaxInt64-now-t.tick {
		return math.MaxInt64 / t.tick
	}
	return (now + d + t.tick - 1) / t.tick
}

// Add implements [Timer]. It never blocks on AdvanceClock for longer than one
// flush takes.
func (t *SystemTimer) Add(task Task) error {
	if task == nil {
		return ErrNilTask
	}
	e := task.base()
	mu := t.mu.stripe(e)
	mu.RLock()
	if t.closed {
		mu.RUnlock()
		return ErrClosed
	}
	e.lockAdd()
	if e.owner != task {
		e.owner = task
	}
	e.expire = t.deadlineTick(e.delay)
	due := e.delay <= 0
	for {
		e.unlink() // a pending task moves: take it out of its old bucket
		if due {
			break
		}
		var linked bool
		linked, due = t.wheel.add(e, e.expire)
		if linked || due || !e.isPending() {
			break
		}
		// Another timer's Add linked it first; take it back and try again.
	}
	run := due && e.fire()
	e.unlockAdd()
	mu.RUnlock()
	if run {
		t.fired.Add(1)
		if t.exec != nil {
			t.exec.submit(task)
		} else {
			t.runTask(task)
		}
	}
	return nil
}

// AdvanceClock implements [Timer].
func (t *SystemTimer) AdvanceClock(timeout time.Duration) bool {
	t.pollMu.Lock()
	b := t.queue.poll(timeout)
	t.pollMu.Unlock()
	if b == nil {
		return false
	}
	return t.advance(b)
}

// advanceDue expires what is due now, without waiting.
func (t *SystemTimer) advanceDue() bool {
	b := t.queue.pollDue(t.now())
	if b == nil {
		return false
	}
	return t.advance(b)
}

// handOffEvery is how many expired tasks a flush collects before handing
// them to the executor without waiting for the flush to end.
const handOffEvery = 1024

// advance flushes b and every other due bucket under the write lock, then
// hands the expired tasks over with no lock held.
func (t *SystemTimer) advance(b *bucket) bool {
	t.mu.lock()
	if t.closed {
		t.mu.unlock()
		return false
	}
	for b != nil {
		t.wheel.advance(b.expiration.Load())
		for e := b.pop(); e != nil; e = b.pop() {
			t.reinsert(e)
			if len(t.expired) >= handOffEvery && t.exec != nil {
				// A coarse bucket can hold a large share of all tasks, and
				// moving it down takes milliseconds: let the executor start
				// on what is due instead of waiting for the whole flush.
				t.fired.Add(uint64(len(t.expired)))
				t.exec.submit(t.expired...)
				clear(t.expired)
				t.expired = t.expired[:0]
			}
		}
		b = t.queue.pollDue(t.now())
	}
	expired := t.expired
	t.expired = nil
	t.mu.unlock()

	if len(expired) > 0 {
		t.fired.Add(uint64(len(expired)))
		if t.exec != nil {
			t.exec.submit(expired...)
		} else {
			for _, task := range expired {
				t.runTask(task)
			}
		}
	}
	clear(expired)
	t.mu.lock()
	if t.expired == nil {
		t.expired = expired[:0] // reuse the slice: no allocation per advance
	}
	t.mu.unlock()
	return true
}

// reinsert puts a flushed entry back into the wheels, one level finer, or
// fires it if it is due. It is Kafka's addTimerTaskEntry for a flushed entry.
// The caller holds mu for writing, so no Add runs; a Cancel may.
func (t *SystemTimer) reinsert(e *TaskBase) {
	if !e.isPending() {
		return // cancelled while it was between buckets
	}
	linked, due := t.wheel.add(e, e.expire)
	switch {
	case due:
		if e.fire() {
			t.expired = append(t.expired, e.owner)
		}
	case linked && !e.isPending():
		// Cancelled after insert checked the state but perhaps before the
		// Cancel could see the entry linked: unlink it here.
		e.unlink()
	}
}

// Size implements [Timer]. It sums the buckets' counts (Kafka keeps one
// shared counter; a counter per bucket keeps parallel Adds off a shared cache
// line), so it costs O(levels × wheel size). While a bucket is being flushed
// its entries are briefly not counted, as in Kafka.
func (t *SystemTimer) Size() int {
	var n int64
	t.wheel.levels(func(w *wheel) {
		for i := range w.buckets {
			n += w.buckets[i].count.Load()
		}
	})
	return int(max(n, 0))
}

// Stats is a snapshot of a timer's counters.
type Stats struct {
	Pending int    // tasks waiting in the wheels, as Size
	Fired   uint64 // tasks handed to the executor (or run inline) so far
	Panics  uint64 // Run calls that panicked and were recovered
}

// Stats returns the timer's counters. It is O(1) and safe to call at any time.
func (t *SystemTimer) Stats() Stats {
	return Stats{Pending: t.Size(), Fired: t.fired.Load(), Panics: t.panics.Load()}
}

// Close implements [Timer].
func (t *SystemTimer) Close() error {
	t.mu.lock()
	if t.closed {
		t.mu.unlock()
		return nil
	}
	t.closed = true
	t.wheel.levels(func(w *wheel) {
		for i := range w.buckets {
			t.flushed = w.buckets[i].flush(t.flushed[:0])
			for _, e := range t.flushed {
				e.Cancel()
			}
		}
	})
	clear(t.flushed)
	t.flushed = nil
	t.queue.clear()
	t.mu.unlock()
	t.queue.stop()
	if t.exec != nil {
		t.exec.close()
	}
	return nil
}

func (t *SystemTimer) wake() { t.queue.stop() }

// runTask runs one task, recovering a panic so that one bad task cannot stop
// the executor, and with it every other timeout in the process.
func (t *SystemTimer) runTask(task Task) {
	defer func() {
		if r := recover(); r != nil {
			t.panics.Add(1)
			if t.onPanic != nil {
				t.onPanic(task, r)
				return
			}
			t.logger.Error("timer: task panicked", "timer", t.name,
				"task", fmt.Sprintf("%T", task), "panic", r)
		}
	}()
	task.Run()
}
