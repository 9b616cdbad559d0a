// Package timer is a port of Apache Kafka's SystemTimer: hierarchical timing
// wheels whose buckets wait in a delay queue, built to hold hundreds of
// thousands of timeouts that are mostly cancelled before they fire.
//
// It relates to [time.AfterFunc] as a bulk tool does to a general one. The
// runtime's timers keep a heap per P, so each start and stop is O(log n),
// each timer is its own 100-plus-byte allocation, and every expiry starts a
// goroutine. Here a task embeds a [TaskBase] and nothing else is
// allocated; Add is O(number of wheel levels), Cancel is O(1), and expired
// tasks run on a fixed set of executor goroutines.
//
// # Usage
//
//	type expiry struct {
//		timer.TaskBase
//		req *Request
//	}
//
//	func (e *expiry) Run() { e.req.Fail(ErrTimeout) }
//
//	st, err := timer.NewSystemTimer("requests")  // tick 1ms, wheel size 20
//	r := timer.NewReaper("requests", st)         // the goroutine that advances it
//	defer r.Close()
//
//	e := &expiry{req: req}
//	e.SetDelay(30 * time.Second)
//	err = r.Add(e)
//	...
//	if e.Cancel() { /* answered in time: the timeout will not run */ }
//
// The caller must:
//
//  1. embed TaskBase in every task, and not copy a task after adding it;
//  2. keep Run short and non-blocking (it runs on the executor, which the
//     other expired tasks share);
//  3. advance the timer: wrap it in a [Reaper], or call AdvanceClock in a loop;
//  4. Close it, which stops the executor and reaper goroutines.
//
// # Add never runs a task
//
// Add files a task and returns. A task that is due already (a delay of zero
// or less, or a deadline inside the current tick) goes into the bucket of
// the current tick, which is due at once, and runs on whatever advances the
// timer: AdvanceClock, a [Reaper], a [MockTimer]'s Advance. So a caller may
// Add while holding a lock that the task's Run takes; package purgatory adds
// each timeout under the operation's lock, which the expiry takes. Kafka's
// SystemTimer and MockTimer run such a task inside add; a MockTimer here
// runs it at the next Advance, Advance(0) included, or, if a task's Run
// added it during an Advance, later in that Advance, at the same instant
// (so a task that adds itself again with delay zero keeps that Advance
// from returning, as it would keep a SystemTimer's executor busy). A
// MockTimer's Advance stops at each deadline on its way and runs the tasks
// due there with the clock reading it.
//
// Every [Timer] reports the clock its deadlines are measured on with Now; a
// [Reaper] forwards its timer's. A Timer implemented outside this package
// must provide Now, and must not run a task inside Add.
//
// Add of a nil Task returns [ErrNilTask]. A nil pointer of a task type is
// not checked for, and panics, as any method call on it would.
//
// # The wheels
//
// A wheel is a ring of buckets, each holding the tasks due within one span of
// time (one tick at the finest level). With tick u and n buckets a wheel
// covers n·u; a task due beyond that goes to an overflow wheel whose tick is
// n·u, created on first use, and so on up. When a bucket of a coarse wheel
// comes due, its tasks are put back into the wheels and fall into finer
// buckets (or run, if due). This example is adapted from the Javadoc of
// Kafka's TimingWheel, with u = 1, n = 3 and start time c:
//
//	level  buckets
//	1      [c,c]    [c+1,c+1]  [c+2,c+2]
//	2      [c,c+2]  [c+3,c+5]  [c+6,c+8]
//	3      [c,c+8]  [c+9,c+17] [c+18,c+26]
//
// A bucket expires at the start of its span, so at c+1 the buckets [c,c],
// [c,c+2] and [c,c+8] have expired. Level 1 moves to c+1 and its freed bucket
// becomes [c+3,c+3]; levels 2 and 3 stay at c, as they move in steps of 3
// and 9:
//
//	1      [c+1,c+1]  [c+2,c+2]  [c+3,c+3]
//	2      [c,c+2]    [c+3,c+5]  [c+6,c+8]
//	3      [c,c+8]    [c+9,c+17] [c+18,c+26]
//
// At c+2, [c+1,c+1] expires and level 1's next bucket is [c+4,c+4]. At c+3,
// level 2 moves too: [c+3,c+5] becomes current, and its freed bucket serves
// [c+9,c+11]:
//
//	1      [c+3,c+3]  [c+4,c+4]  [c+5,c+5]
//	2      [c+3,c+5]  [c+6,c+8]  [c+9,c+11]
//	3      [c,c+8]    [c+9,c+17] [c+18,c+26]
//
// The buckets [c,c+2] and [c,c+8] never receive a task, since a finer level
// already covers their span; Kafka accepts that waste for simplicity and so
// does this package.
//
// # Overlapping levels: moving down ahead of time
//
// In Kafka's wheels a coarse bucket is flushed when its span starts: every
// entry in it is moved to a finer level at that moment, and the tasks due
// first wait until all of them have been moved. With a million timeouts due
// within a second, one 400 ms bucket holds 400,000 entries, and moving them
// stalls expiry for tens of milliseconds.
//
// This package gives each level 2n buckets while keeping the next level's
// tick at n of this level's: a level reaches two coarse buckets ahead instead
// of one. A coarse bucket then fits entirely one level down a whole span
// before it is due, so it is taken from the delay queue that much early and
// moved down in chunks of 1024 entries, between the expiries of the finest
// level. One rule keeps the order exact: before any bucket due at or after
// the start of a coarse bucket's span is handled, that coarse bucket is moved
// down completely. With n = 3, level 1 has 6 one-tick buckets and reaches
// [c, c+5]; level 2 has 6 buckets of 3 ticks and reaches [c, c+17]; the
// bucket [c+6,c+8] of level 2 is taken at c+3 and moved into level 1 while
// level 1 still serves [c+3, c+5].
//
// # The delay queue
//
// Only buckets that hold tasks are queued, in a heap by the time they are
// due (their expiration, less a span for coarse buckets). The goroutine in
// AdvanceClock sleeps on one reusable timer until the earliest bucket is due
// (or an Add queues an earlier one), handles it and every other due bucket,
// and sleeps again. An idle timer therefore costs nothing, and a timer whose
// next task is an hour away wakes once, not 3.6 million times. The wait is
// a runtime timer (time.Timer on the system clock) and the time is read with
// time.Since, so a timer inside a testing/synctest bubble runs on the
// bubble's fake time, and a MockTimer on its own clock.
//
// The wait takes nothing out of the queue: due buckets are taken out only
// under the timer's write lock. An Add holds a read lock from its reading of
// the clock to queueing its bucket, so it comes wholly before or wholly
// after each such poll: a task added before an AdvanceClock was called,
// and due when it polls, is expired by that AdvanceClock. Two goroutines
// advancing one timer take turns, each seeing the other's work whole.
//
// When every processor is busy the runtime may not run the sleeping
// goroutine for 10 ms or more; an Add that finds it 2 ms behind the timer's
// clock wakes it and yields once (see SystemTimer.Add).
//
// # Operations' timeouts
//
// A timer holds the timeouts of package purgatory's operations differently
// from a [TaskBase]: a bucket keeps them in slots, words of chunks it
// fills in order, and an operation's completion clears its slot with one
// compare-and-swap, with no bucket lock and no neighbours' links to write.
// Most such timeouts never come (a produce waits milliseconds for its
// replicas and has 30 s to do it), and slots spare the parks and
// completions of many goroutines a fight over one coarse bucket's locks.
// The first slot is also the operation's handle, which its watch lists
// hold, so a completed operation is unreachable from the timer at once.
// A TaskBase is linked into its bucket's list, as in Kafka. Counting the
// slots is what makes Size cost O(timeouts held) (see [SystemTimer.Size]).
//
// # Precision
//
// A task never runs before its deadline. Deadlines are rounded up to the next
// tick, so a task runs no later than one tick after its deadline, plus the
// time the reaper and executor take to get to it (scheduling, and on a busy
// machine waiting for a processor). A deadline at or past the end of the
// clock's range (math.MaxInt64 nanoseconds after its origin, 292 years) never
// comes: such a task stays pending until cancelled. docs/timer.md has
// measured figures.
//
// # Locks
//
// A SystemTimer has a reader/writer lock, striped by task address: Add holds
// one stripe for reading; advancing and Close hold every stripe for writing.
// Under it comes a task's add-lock, a bit of its state that only its holder
// may link the task into a bucket under: an Add waits for it, the reaper
// refiling the task only tries it. Under that come the buckets' locks (each bucket keeps its entries in four
// stripes with a mutex each; only the flush of a due bucket, under the write
// lock, holds that bucket's four, taken in order), and under those the
// delay queue's mutex. Cancel takes only the mutex of the stripe holding the
// task, so it never waits for an advance, only, for a task in a due bucket,
// for that bucket's flush. Run is called with no lock held, so
// a task may Add or Cancel any task, itself included.
//
// # Options and their costs
//
//   - [WithTick] (1ms): the precision. A finer tick wakes the reaper more often
//     and moves each entry through more buckets.
//   - [WithWheelSize] (20): n, the ratio of one level's tick to the next's;
//     each level has 2n buckets. Larger wheels mean fewer levels and fewer
//     moves per entry, for 640 bytes per bucket (four padded stripes).
//   - [WithExecutors] (1): goroutines running expired tasks. One keeps expiry
//     order; more keep a slow task from holding up the rest; zero runs them on
//     the goroutine advancing the clock, which on a busy machine halves the
//     scheduling waits an expiry goes through (package purgatory does this).
//   - [WithClock]: a [Clock] of your own; for tests, [MockTimer] or a
//     testing/synctest bubble.
//   - [WithPanicHandler], [WithLogger]: where a recovered panic is reported.
//
// A panic in Run is recovered and reported (to the handler given to
// [WithPanicHandler], or logged); it never stops the timer, because one bad task must not silently disable
// every other timeout in the process.
package timer
