// Package timer is a port of Apache Kafka's SystemTimer: hierarchical timing
// wheels whose buckets wait in a delay queue, built to hold hundreds of
// thousands of timeouts that are mostly cancelled before they fire.
//
// It relates to [time.AfterFunc] as a bulk tool does to a general one. The
// runtime's timers keep a heap per P, so each start and stop is O(log n),
// each timer is its own 100-plus-byte allocation, and every expiry starts a
// goroutine. Here a task embeds a 64-byte [TaskBase] and nothing else is
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
//	st, err := timer.NewSystemTimer("requests")  // tick 1ms, 20 buckets a level
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
// # The delay queue
//
// Only buckets that hold tasks are queued, in a heap by expiration. The
// goroutine in AdvanceClock sleeps on one reusable timer until the earliest
// bucket is due (or an Add queues an earlier one), flushes it and every other
// due bucket, and sleeps again. An idle timer therefore costs nothing, and a
// timer whose next task is an hour away wakes once, not 3.6 million times.
//
// # Precision
//
// A task never runs before its deadline. Deadlines are rounded up to the next
// tick, so a task runs no later than one tick after its deadline, plus the
// time the reaper and executor take to get to it. Under heavy load most of
// that extra time is cascading: when a coarse bucket comes due, every entry in
// it is moved down at once (see docs/timer.md for the figures).
//
// # Locks
//
// A SystemTimer has a reader/writer lock, striped by task address: Add holds
// one stripe for reading; advancing and Close hold every stripe for writing.
// Under it come the buckets' mutexes (never two at once), and under those the
// delay queue's mutex. Cancel takes only the mutex of the task's bucket, so it
// never waits for an advance. Run is called with no lock held, so a task may
// Add or Cancel any task, itself included.
//
// # Options and their costs
//
//   - [WithTick] (1ms): the precision. A finer tick wakes the reaper more often
//     and moves each entry through more buckets.
//   - [WithWheelSize] (20): buckets per level. Larger wheels mean fewer levels
//     and fewer moves per entry, for 104 bytes per bucket per level.
//   - [WithExecutors] (1): goroutines running expired tasks. One keeps expiry
//     order; more keep a slow task from holding up the rest.
//   - [WithClock]: [MockClock] for tests; [MockTimer] packages the usual setup.
//   - [WithPanicHandler], [WithLogger]: where a recovered panic is reported.
//
// A panic in Run is recovered, counted in [SystemTimer.Stats] and reported;
// it never stops the timer, because one bad task must not silently disable
// every other timeout in the process.
package timer
