package core

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// hooks are points between two steps of the timer where another goroutine
// may act. A timer's hooks are nil outside this package's tests, which set
// them on the instance they test.
type hooks struct {
	// flushed is called with entries taken out of a bucket (a due one, or
	// a batch of a coarser one moving down) before they are fired or put
	// back: a step that a Cancel can act between.
	flushed func([]*Entry)
	// refile is called by reinsert with the entry it refiles, holding its
	// add-lock: before it is linked (linked false), and after the wheel's
	// add linked it, or found it cancelled (true), before the lock is
	// released.
	refile func(e *Entry, linked bool)
	// clockRead is called by an add (Add, or fileOp) once it has read the
	// clock, holding its read lock, before it files the entry.
	clockRead func()
	// turning is called by turn before it takes the write lock.
	turning func()
}

// Timer is the engine of package timer's SystemTimer and MockTimer:
// Kafka's SystemTimer, hierarchical timing wheels whose buckets wait in a
// delay queue. Add and Cancel are O(1) in the number of pending tasks (Add
// is O(number of levels)); AdvanceClock moves the wheels only when a
// bucket is due.
//
// Add calls run in parallel with each other (they share a read lock) and
// with Cancel (which takes only the bucket's lock); AdvanceClock excludes
// Add while it moves the wheels. Expired tasks run on executor goroutines,
// or on the goroutine advancing the timer, never under a timer lock, so a
// task may Add itself or others again.
type Timer struct {
	name  string
	clock Clock   // nil for the system clock (SystemNow)
	tick  int64   // nanoseconds per tick
	per   divisor // divides by tick
	// lastTick is the last tick whose start the clock can reach.
	lastTick int64
	// never holds the entries whose deadline no clock reaches (tickOf).
	never List

	// mu is held for reading by Add (one stripe) and for writing (every
	// stripe) while the wheels advance and while closing. Lock order: mu,
	// then a bucket's mu, then the delay queue's mu.
	mu      lockShards
	wheel   *wheel      // finest level; coarser ones hang off it
	closed  bool        // guarded by mu
	shut    atomic.Bool // closed, readable without mu
	expired []expiry    // expired entries of one turn, guarded by mu (write)
	flushed []*Entry    // entries taken out of a bucket while they are refiled, guarded by mu (write)
	backlog []*bucket   // coarse buckets being moved down, guarded by mu (write)
	// slotlog holds the slot chunks of the backlog's buckets (they are
	// taken out when a bucket joins it), moved down from slotAt on.
	// Guarded by mu (write).
	slotlog []slotRun
	slotAt  int

	// backlogLen is len(backlog) + len(slotlog), read without mu by
	// AdvanceClock.
	backlogLen atomic.Int32
	spareMu    sync.Mutex
	spare      []expiry // a drained expired slice, for reuse

	pollMu sync.Mutex // one poller of the delay queue at a time
	queue  *delayQueue

	fired  atomic.Uint64
	panics atomic.Uint64

	exec    *executor // nil when tasks run inline (MockTimer)
	onPanic func(task Sealed, recovered any)
	logger  *slog.Logger
	hooks   *hooks // nil but in tests
}

// ErrClosed is returned by Add once the timer has been closed (package
// timer's ErrClosed).
var ErrClosed = errors.New("timer: closed")

// Config is what New needs. Package timer validates it.
type Config struct {
	Name      string        // for logs
	Tick      time.Duration // span of a bucket of the finest level, > 0
	WheelSize int           // buckets a level spans, 2 to 4096
	// Clock is what deadlines are read from and waited on; nil is the
	// system clock (SystemNow), read without an interface call.
	Clock Clock
	// Executors is the number of goroutines running expired tasks; zero
	// runs them on the goroutine advancing the timer, after it lets go
	// of the timer's locks.
	Executors int
	// OnPanic is called with the task (nil for an operation's entry) and
	// the recovered value when a Run panics; nil logs it with Logger.
	OnPanic func(task Sealed, recovered any)
	Logger  *slog.Logger // nil is slog.Default()
}

// New returns a timer, and starts its executor goroutines. Close it to
// stop them.
func New(c Config) *Timer {
	t := &Timer{
		name:     c.Name,
		clock:    c.Clock,
		tick:     int64(c.Tick),
		per:      newDivisor(int64(c.Tick)),
		lastTick: math.MaxInt64 / int64(c.Tick),
		onPanic:  c.OnPanic,
		logger:   c.Logger,
	}
	if t.logger == nil {
		t.logger = slog.Default()
	}
	t.never.Init()
	clock := c.Clock
	if clock == nil {
		clock = systemClock{}
	}
	t.queue = newDelayQueue(t.now, clock, c.Tick)
	t.wheel = newWheel(1, c.WheelSize, t.nowTick(), t.queue)
	if c.Executors > 0 {
		t.exec = newExecutor(c.Executors, t.runTask)
	}
	return t
}

// Now reads the timer's clock, on which its deadlines are measured.
func (t *Timer) Now() time.Duration { return t.now() }

// now reads the clock: SystemNow directly when that is the clock (it
// inlines, where a call through the interface does not: 2% of
// BenchmarkAddCancelNewTask), the same reading either way.
func (t *Timer) now() time.Duration {
	if t.clock == nil {
		return SystemNow()
	}
	return t.clock.Now()
}

func (t *Timer) nowTick() int64 { return t.per.div(int64(t.now())) }

// tickOf returns the first tick that starts at or after deadline: a task
// due inside a tick waits for the end of that tick, so it is never early.
//
// A deadline whose tick would start past the clock's range (math.MaxInt64
// nanoseconds), a saturated one among them, never comes: tickOf returns
// never, and the entry waits in t.never, outside the wheels, until it is
// cancelled. Rounding it into the last tick instead would run it early.
func (t *Timer) tickOf(deadline int64) int64 {
	if deadline <= math.MaxInt64-t.tick {
		// The tick that starts at or after deadline starts in range.
		return t.per.div(deadline + t.tick - 1)
	}
	if deadline == math.MaxInt64 {
		return never
	}
	k := t.per.div(deadline)
	if k*t.tick < deadline {
		k++
	}
	if k > t.lastTick {
		return never
	}
	return k
}

// never is tickOf's answer for a deadline no clock reaches.
const never = math.MaxInt64

// Add schedules the task whose entry task holds to run once its delay has
// elapsed, measured from Now; see package timer's Timer.Add. It never
// blocks on AdvanceClock for longer than one flush takes, and it never runs
// a task: one that is due already (a delay of zero or less, or a deadline
// inside the current tick) goes into the bucket of the current tick, which
// is due at once, and runs on the goroutine that advances the timer, as
// every other task does. A caller may therefore Add while holding a lock
// that the task's Run takes.
//
// An Add that finds the goroutine advancing the clock more than 2 ms behind
// its clock (asleep past a due bucket, or in one AdvanceClock for that
// long) wakes it and yields the processor once (runtime.Gosched): on a
// machine whose processors are all busy, a loop that adds tasks would
// otherwise hold off the expiries until the runtime preempts it. At most
// one Add does so every 2 ms.
func (t *Timer) Add(task Sealed) error {
	if t.shut.Load() {
		return ErrClosed
	}
	e := task.mustEmbedTaskBase()
	if e == nil {
		return t.addSlot(task.mustEmbedTaskBaseSlot())
	}
	mu := t.mu.stripe(entryIndex(e))
	mu.RLock()
	if t.closed {
		mu.RUnlock()
		return ErrClosed
	}
	e.LockAdd()
	if e.Owner == nil {
		e.Owner = task
	}
	now := int64(t.now())
	if t.hooks != nil && t.hooks.clockRead != nil {
		t.hooks.clockRead()
	}
	e.Expire = Deadline(int64(e.LoadDelay()), now)
	// A pending task moves: take it out of its old bucket. Holding the
	// add-lock, nobody else links it until the wheel does.
	e.Unlink()
	switch tick := t.tickOf(e.Expire); {
	case e.Expire <= now:
		t.wheel.addDue(e)
	case tick == never:
		t.never.Insert(e)
	default:
		if t.wheel.add(e, tick) {
			t.wheel.addDue(e)
		}
	}
	e.UnlockAdd()
	mu.RUnlock()
	if t.queue.late(now) {
		t.queue.nudge(now) // the expiries are late: give way to them
	}
	return nil
}

// AdvanceClock waits up to timeout for the earliest bucket to be due, then
// expires every due task; see package timer's Timer.AdvanceClock. While
// coarse buckets are being moved down ahead of time it does not wait: each
// call moves up to cascadeChunk entries (after expiring whatever is due)
// and returns true, so that a Reaper keeps calling it until the work is
// done.
func (t *Timer) AdvanceClock(timeout time.Duration) bool {
	if t.shut.Load() {
		return false // nothing will ever be due: do not wait for the timeout
	}
	defer t.queue.done()
	if t.backlogLen.Load() > 0 {
		t.queue.working(t.now())
		return t.turn(nil)
	}
	t.pollMu.Lock()
	due := t.queue.wait(timeout)
	t.pollMu.Unlock()
	if !due {
		return false
	}
	return t.turn(nil)
}

// AdvanceDue does what is due now, and one chunk of moving down, without
// waiting, and reports whether there was anything to do. A MockTimer
// calls it until it reports false.
func (t *Timer) AdvanceDue() bool { return t.turn(nil) }

const (
	// handOffEvery is how many expired tasks a flush collects before handing
	// them to the executor without waiting for the flush to end.
	handOffEvery = 1024
	// cascadeChunk is how many entries of coarse buckets one turn moves
	// down: about 50-100µs of work, so that the buckets of the finest level,
	// whose tasks are due, are never kept waiting longer than that.
	cascadeChunk = 1024
	// maxKeptFlush is the largest scratch slice kept between due buckets
	// (64 KiB of pointers).
	maxKeptFlush = 8192
)

// turn is one turn of AdvanceClock, under the write lock:
//
//  1. Handle every bucket that is due. A bucket of the
//     finest level is flushed: its tasks are due and are handed to the
//     executor. A coarser bucket is polled a whole span before it is due (its
//     lead) and joins the backlog of buckets to move down.
//  2. Move down at most cascadeChunk entries of the backlog, then return, so
//     that Adds and due buckets are not held up by a large bucket.
//
// The finer level reaches two of the coarser level's buckets ahead, so a
// backlog bucket fits entirely one level down from the moment it is polled.
// One rule keeps the order exact: before handling any bucket due at or after
// the start of a backlog bucket's span, that backlog bucket is moved down
// completely (and the bucket is put back, since moving down may create
// earlier ones).
//
// The due buckets are taken from the delay queue here, under the write
// lock, and nowhere else. An Add holds the read lock from its reading of
// the clock to the offer of its bucket, so a bucket an Add offers is
// either queued before this poll, and taken if due, or comes from an Add
// that read the clock after this turn, and is not due before it. Two
// goroutines advancing one timer take turns, each seeing the other's
// work whole.
//
// With move, the turn calls it first, under the write lock: a MockTimer
// moves its clock there, so that the move and the handling of what it
// made due are one step for every Add and Reschedule.
func (t *Timer) turn(move func()) bool {
	if t.hooks != nil && t.hooks.turning != nil {
		t.hooks.turning()
	}
	t.mu.lock()
	if move != nil {
		move()
	}
	if t.closed {
		t.mu.unlock()
		return false
	}
	b := t.queue.pollDue(t.now())
	did := b != nil
	for b != nil {
		if t.drainBefore(b) {
			t.queue.offer(b) // moving down may have made earlier buckets: take them first
		} else if b.lead == 0 {
			// Every entry is due: take them all out under one lock a
			// stripe (a Cancel meanwhile finds them in no bucket, and
			// the firing skips what it cancelled), then fire them; and
			// fire the entries of its slots.
			t.wheel.advance(b.expiration.Load())
			chunks := b.takeSlots(nil)
			t.flushed = b.flush(t.flushed[:0])
			t.refile(true)
			for _, ch := range chunks {
				for i := range ch {
					if e := ch[i].e.Load(); e != nil {
						t.fireSlot(&ch[i], e)
					}
				}
			}
		} else {
			t.wheel.advance(b.expiration.Load() - b.lead)
			t.backlog = append(t.backlog, b)
			if chunks := b.takeSlots(nil); len(chunks) > 0 {
				t.slotlog = append(t.slotlog, slotRun{exp: b.expiration.Load(), chunks: chunks})
			}
			t.setBacklogLen()
		}
		b = t.queue.pollDue(t.now())
	}
	moved := t.moveSlots(cascadeChunk)
	if moved > 0 {
		did = true
	}
	for moved < cascadeChunk && len(t.backlog) > 0 {
		t.flushed = t.backlog[0].popInto(t.flushed[:0], cascadeChunk-moved)
		if len(t.flushed) == 0 {
			t.backlog[0] = nil
			t.backlog = t.backlog[1:]
			t.setBacklogLen()
			continue
		}
		moved += len(t.flushed)
		t.refile(false)
		did = true
	}
	expired := t.expired
	t.expired = t.takeSpare()
	t.mu.unlock()
	t.dispatch(expired)
	return did
}

// drainBefore moves down, completely, every backlog bucket whose span
// starts at or before b's due time, and reports whether there was any.
// The caller holds the write lock.
func (t *Timer) drainBefore(b *bucket) bool {
	due := b.expiration.Load() - b.lead
	drained := t.moveSlotsBefore(due)
	for i, c := range t.backlog {
		if c == nil || c.expiration.Load() > due {
			continue
		}
		for {
			if t.flushed = c.popInto(t.flushed[:0], cascadeChunk); len(t.flushed) == 0 {
				break
			}
			t.refile(false)
		}
		t.backlog[i] = nil
		drained = true
	}
	if drained {
		t.backlog = slices.DeleteFunc(t.backlog, func(c *bucket) bool { return c == nil })
		t.setBacklogLen()
	}
	return drained
}

// setBacklogLen publishes how much work the backlogs hold. The caller
// holds the write lock.
func (t *Timer) setBacklogLen() {
	t.backlogLen.Store(int32(len(t.backlog) + len(t.slotlog)))
}

// slotRun is the slot chunks of a coarse bucket being moved down: exp is
// the bucket's expiration, the start of its span.
type slotRun struct {
	exp    int64
	chunks []*slotChunk
}

// moveSlots moves down up to max slots of the slot backlog, from the
// first run on, and returns how many it looked at. The caller holds the
// write lock.
func (t *Timer) moveSlots(max int) int {
	n := 0
	for len(t.slotlog) > 0 && n < max {
		run := &t.slotlog[0]
		for ; t.slotAt < len(run.chunks)*slotChunkLen && n < max; t.slotAt++ {
			s := &run.chunks[t.slotAt/slotChunkLen][t.slotAt%slotChunkLen]
			if e := s.e.Load(); e != nil {
				t.refileSlot(s, e)
			}
			n++
		}
		if t.slotAt < len(run.chunks)*slotChunkLen {
			break
		}
		t.slotlog[0] = slotRun{}
		t.slotlog, t.slotAt = t.slotlog[1:], 0
		t.setBacklogLen()
	}
	return n
}

// moveSlotsBefore moves down, completely, every run of the slot backlog
// whose bucket's span starts at or before tick due, and reports whether
// there was any. The caller holds the write lock.
func (t *Timer) moveSlotsBefore(due int64) bool {
	moved := false
	for {
		i := slices.IndexFunc(t.slotlog, func(r slotRun) bool { return r.exp <= due })
		if i < 0 {
			return moved
		}
		if i > 0 {
			// To the front. The run that was there starts again from its
			// first slot later, and skips the slots it has moved: their
			// entries' current slots are elsewhere.
			run := t.slotlog[i]
			copy(t.slotlog[1:i+1], t.slotlog[:i])
			t.slotlog[0], t.slotAt = run, 0
		}
		for n := len(t.slotlog); len(t.slotlog) == n; {
			t.moveSlots(cascadeChunk)
		}
		moved = true
	}
}

// refile handles the entries in t.flushed, just taken out of a bucket:
// with due, a due bucket of the finest level, whose entries are all due
// and fire; otherwise a coarse bucket's batch moving down, which reinsert
// puts back one level finer. It then empties t.flushed for the next batch.
// Between taking an entry out and refiling it a Cancel finds it in no
// bucket and wins; the entry is then skipped. The caller holds the write
// lock.
func (t *Timer) refile(due bool) {
	if t.hooks != nil && t.hooks.flushed != nil {
		t.hooks.flushed(t.flushed)
	}
	for _, e := range t.flushed {
		if due {
			t.fire(e)
		} else {
			t.reinsert(e)
		}
	}
	clear(t.flushed)
	if cap(t.flushed) > maxKeptFlush {
		t.flushed = nil // one huge bucket should not pin its size
	}
}

// dispatch hands expired tasks over with no lock held and keeps the slice
// for reuse, so that steady expiry allocates nothing.
func (t *Timer) dispatch(expired []expiry) {
	if len(expired) > 0 {
		t.fired.Add(uint64(len(expired)))
		if t.exec != nil {
			t.exec.submit(expired...)
		} else {
			for _, x := range expired {
				t.runTask(x)
			}
		}
	}
	clear(expired)
	t.spareMu.Lock()
	t.spare = expired[:0]
	t.spareMu.Unlock()
}

func (t *Timer) takeSpare() []expiry {
	t.spareMu.Lock()
	defer t.spareMu.Unlock()
	s := t.spare
	t.spare = nil
	return s
}

// reinsert puts an entry taken out of a coarse bucket back into the wheels,
// one level finer, or fires it if it is due already (a late reaper). It is
// Kafka's addTimerTaskEntry for a flushed entry. The caller holds mu for
// writing, so no Add to this timer runs; a Cancel may, and so may an Add
// of the task to another timer.
//
// It holds the task's add-lock throughout: only its holder links an entry,
// and an Add writes the deadline only while holding it. No lock means the
// entry was cancelled meanwhile, or is being added to another timer, whose
// Add places it; if that Add is already over, insert finds the entry in a
// list and leaves it there. A Cancel after the link is seen by unlockAdd,
// which unlinks it.
func (t *Timer) reinsert(e *Entry) {
	if !e.TryLockAdd() {
		return
	}
	h := t.hooks
	if h != nil && h.refile != nil {
		h.refile(e, false)
	}
	if t.wheel.add(e, t.tickOf(e.Expire)) {
		t.fire(e)
	} else if h != nil && h.refile != nil {
		h.refile(e, true)
	}
	e.UnlockAdd()
}

// fire moves a due entry to the expired batch, unless a Cancel won. The
// caller holds mu for writing.
func (t *Timer) fire(e *Entry) {
	if e.Fire() {
		t.queueExpiry(expiry{task: e})
	}
}

// expireOp queues the expiry of an operation's entry that has fired. The
// caller holds mu for writing.
func (t *Timer) expireOp(e *OpEntry) { t.queueExpiry(expiry{op: e}) }

// expiry is a fired entry: a task's, or an operation's.
type expiry struct {
	task *Entry
	op   *OpEntry
}

// queueExpiry adds a fired entry to the expired batch. The caller holds mu
// for writing.
func (t *Timer) queueExpiry(x expiry) {
	t.expired = append(t.expired, x)
	if len(t.expired) >= handOffEvery && t.exec != nil {
		// Hand a large batch over at once, so that the executor starts on
		// it while the flush goes on.
		t.fired.Add(uint64(len(t.expired)))
		t.exec.submit(t.expired...)
		clear(t.expired)
		t.expired = t.expired[:0]
	}
}

// Size reports the number of pending tasks and operations' timeouts. It
// sums the buckets' counts of linked tasks (Kafka keeps one shared
// counter; counters per bucket stripe keep Adds and Cancels on different
// cores off a shared cache line), each read under its stripe's lock,
// which Add and Cancel hold anyway, so that they change it with a plain
// increment; and it counts the operations' entries, each at its current
// slot, which nothing counts as they come and go (a completion clears a
// slot without a lock). So Size costs a few hundred uncontended lock
// acquisitions and a read of every slot and of its operation's entry:
// O(operations pending), about 25 ms for a million on a 2-core machine. It is for metrics and tests, not for a hot
// path. While a bucket is being flushed its entries are briefly not
// counted, as in Kafka.
func (t *Timer) Size() int {
	// The slots are taken out of buckets by turns, under the write lock:
	// one stripe's read lock keeps them still while they are counted.
	mu := &t.mu[0]
	mu.RLock()
	defer mu.RUnlock()
	n := t.never.Count() + t.never.countSlots()
	for _, r := range t.slotlog {
		eachCurrent(r.chunks, func(*Slot, *OpEntry) { n++ })
	}
	t.wheel.levels(func(w *wheel) {
		for i := range w.buckets {
			n += w.buckets[i].size()
		}
	})
	return int(max(n, 0))
}

// Counts returns how many tasks have been handed to the executor (or run
// inline) so far, and how many Runs panicked and were recovered.
func (t *Timer) Counts() (fired, panics uint64) { return t.fired.Load(), t.panics.Load() }

// Close stops the timer: pending tasks are dropped without running and
// marked cancelled; tasks already handed to the executor still run, and
// Close waits for them. Close is idempotent.
func (t *Timer) Close() error {
	t.mu.lock()
	if t.closed {
		t.mu.unlock()
		return nil
	}
	t.closed = true
	t.shut.Store(true)
	var flushed []*Entry
	var chunks []*slotChunk
	t.wheel.levels(func(w *wheel) {
		for i := range w.buckets {
			flushed = w.buckets[i].flush(flushed[:0])
			for _, e := range flushed {
				e.Cancel()
			}
			chunks = w.buckets[i].takeSlots(chunks)
		}
	})
	for _, e := range t.never.PopInto(nil, math.MaxInt) {
		e.Cancel()
	}
	t.never.Lock()
	chunks = append(chunks, t.never.slots.take()...)
	t.never.Unlock()
	for _, r := range t.slotlog {
		chunks = append(chunks, r.chunks...)
	}
	eachCurrent(chunks, func(_ *Slot, e *OpEntry) { e.Cancel() })
	clear(t.backlog)
	t.backlog = nil
	t.slotlog, t.slotAt = nil, 0
	t.setBacklogLen()
	t.queue.clear()
	t.mu.unlock()
	t.queue.stop()
	if t.exec != nil {
		t.exec.close()
	}
	return nil
}

// Wake cuts short an AdvanceClock that is waiting, and keeps every later
// one from waiting, for a Reaper that is closing: its goroutine may be
// anywhere on its way into the wait, and the timer is closed next.
func (t *Timer) Wake() { t.queue.stop() }

// runTask runs one expired entry, recovering a panic so that one bad task
// cannot stop the executor, and with it every other timeout in the
// process.
func (t *Timer) runTask(x expiry) {
	defer func() {
		if r := recover(); r != nil {
			t.panics.Add(1)
			var task Sealed
			if x.task != nil {
				task, _ = x.task.Owner.(Sealed)
			}
			if t.onPanic != nil {
				t.onPanic(task, r)
				return
			}
			t.logger.Error("timer: task panicked", "timer", t.name,
				"task", fmt.Sprintf("%T", task), "panic", r)
		}
	}()
	x.run()
}

// run runs an expired entry: the expiry target's ExpireEntry for an
// operation's (whose own Run method, if it has one, is never consulted),
// the task's Run for a task's.
func (x expiry) run() {
	if x.op != nil {
		if ex := ExpirerOf(x.op); ex != nil {
			ex.ExpireEntry(x.op, true)
		}
		return
	}
	if t, ok := x.task.Owner.(interface{ Run() }); ok {
		t.Run()
	}
}
