package core

import (
	"container/heap"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// delayQueue holds the buckets that have entries, ordered by expiration. It
// plays the part of java.util.concurrent.DelayQueue in Kafka's SystemTimer:
// the goroutine that advances the clock sleeps in wait until the earliest
// bucket is due, so the clock moves only when there is work, never on empty
// ticks.
//
// offer may be called by any goroutine; pollDue under the timer's write
// lock; wait by one goroutine at a time (Timer serialises it with
// pollMu).
type delayQueue struct {
	mu    sync.Mutex
	items bucketHeap // guarded by mu

	now      func() time.Duration // the timer's clock
	tickNano int64

	// wake carries a token when a bucket becomes the new head, so that a
	// sleeping poll recomputes its wait; it holds at most one token.
	wake chan struct{}
	// quit is closed by stop: every wait from then on, and the one under
	// way, returns false without sleeping. A closed channel rather than a
	// token, so that a stop is seen whenever it comes: before the wait,
	// between its check of the heap and its select, or inside the select.
	// A token sent while no wait was under way could be taken by the wrong
	// wait, or by none (issue 43: a Reaper's Close lost on a MockTimer,
	// whose clock nothing moved any more).
	quit    chan struct{}
	stopped bool // quit is closed; guarded by mu

	// timer is the one reusable clock timer wait sleeps on; no timer or
	// goroutine is ever created per task or per bucket. On the system
	// clock it is a time.Timer, so a poll sleeps on the runtime's timers,
	// and inside a testing/synctest bubble on the bubble's fake time.
	timer ClockTimer

	// lateAt is the clock time after which the goroutine advancing the
	// clock counts as late (see nudge): nudgeAfter after the head bucket
	// is due while its poll sleeps, nudgeAfter after it last woke while
	// it works, and math.MaxInt64 with nothing queued or between
	// AdvanceClocks. Every Add reads it; the advancing goroutine, a nudge
	// and an offer of a new head write it. (A cache line of its own was
	// measured at 1057b81 and bought nothing: BenchmarkAddCancelParallel
	// and perf run C the same within noise.)
	lateAt atomic.Int64

	// polling is set while a poll runs, for offer.
	polling atomic.Bool
}

// nudgeAfter is how late the goroutine advancing the clock may be before an
// Add nudges it. A poll on time wakes within about a millisecond of its
// bucket (the runtime's timers wake on millisecond boundaries), so two
// milliseconds late means it has not been run: every processor is held by
// goroutines that do not pass through the scheduler, such as a loop that
// parks requests and the collector's mark worker, and the runtime runs the
// poll's timer only when one of them is preempted, 10 ms or more later.
const nudgeAfter = 2 * time.Millisecond

func newDelayQueue(now func() time.Duration, clock Clock, tick time.Duration) *delayQueue {
	t := clock.NewTimer(time.Hour)
	t.Stop()
	q := &delayQueue{
		now:      now,
		tickNano: int64(tick),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		timer:    t,
	}
	q.lateAt.Store(math.MaxInt64)
	return q
}

// offer queues b by its current expiration, or moves it if it is queued.
func (q *delayQueue) offer(b *bucket) {
	q.mu.Lock()
	b.due = b.expiration.Load() - b.lead
	if b.index >= 0 {
		heap.Fix(&q.items, b.index)
	} else {
		heap.Push(&q.items, b)
	}
	head := q.items[0] == b
	due := q.dueAt(b.due)
	q.mu.Unlock()
	if head {
		// A poll sleeping for a later bucket, or for none, is late if it
		// has not woken for this one nudgeAfter after it is due.
		at := int64(addSat(due, nudgeAfter))
		if q.polling.Load() {
			for old := q.lateAt.Load(); at < old && !q.lateAt.CompareAndSwap(old, at); old = q.lateAt.Load() {
			}
		}
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// dueAt converts a tick to the clock time it begins at, saturating.
func (q *delayQueue) dueAt(tick int64) time.Duration {
	if tick > math.MaxInt64/q.tickNano {
		return math.MaxInt64
	}
	return time.Duration(tick * q.tickNano)
}

// pollDue removes and returns the head if it is due at now, else nil.
func (q *delayQueue) pollDue(now time.Duration) *bucket {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.dueAt(q.items[0].due) > now {
		return nil
	}
	return heap.Pop(&q.items).(*bucket)
}

// head returns the time the head bucket is due at, if any is queued.
func (q *delayQueue) head() (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return 0, false
	}
	return q.dueAt(q.items[0].due), true
}

// wait waits up to timeout for the head bucket to be due, and reports
// whether one is; once stop has been called it returns false at once. It
// takes nothing out of the queue: the caller polls the due buckets
// (pollDue) under the timer's write lock, so that Adds, which hold the
// read lock from reading the clock to offering their bucket, are either
// wholly before that poll or wholly after it. A wait that popped the
// bucket itself would let an Add offer an earlier bucket between the pop
// and the turn that handles it, or let a second goroutine advancing the
// same timer handle later buckets first.
func (q *delayQueue) wait(timeout time.Duration) bool {
	deadline := addSat(q.now(), max(timeout, 0))
	q.polling.Store(true)
	defer q.polling.Store(false)
	for {
		now := q.now()
		q.working(now)
		q.mu.Lock()
		if q.stopped {
			q.mu.Unlock()
			return false
		}
		wait := deadline - now
		headDue := time.Duration(math.MaxInt64) // nothing queued
		if len(q.items) > 0 {
			headDue = q.dueAt(q.items[0].due)
			if headDue <= now {
				q.mu.Unlock()
				return true
			}
			wait = min(wait, headDue-now)
		}
		q.mu.Unlock()
		if wait <= 0 {
			return false
		}
		// Late nudgeAfter after the head is due, even when this wait ends
		// first, at the deadline: a wake for the deadline that comes late
		// holds off the next poll, and so the bucket, just as long. With
		// nothing queued, nothing is late (addSat saturates).
		q.lateAt.Store(int64(addSat(headDue, nudgeAfter)))
		q.timer.Reset(wait)
		select {
		case <-q.timer.C():
		case <-q.wake:
			q.timer.Stop()
		case <-q.quit:
			q.timer.Stop()
			return false
		}
	}
}

// working marks the goroutine advancing the clock as awake at now: it is
// late if it has not waited again, or called working again, nudgeAfter
// later.
func (q *delayQueue) working(now time.Duration) {
	q.lateAt.Store(int64(addSat(now, nudgeAfter)))
}

// done marks the end of an AdvanceClock: nothing is late until the next.
func (q *delayQueue) done() { q.lateAt.Store(math.MaxInt64) }

// late reports whether the goroutine advancing the clock is late at now.
// It is one load of a line that changes about once a bucket, so every Add
// can afford to ask.
func (q *delayQueue) late(now int64) bool { return now > q.lateAt.Load() }

// nudge wakes a late poll and yields the caller's processor, so that the
// goroutine advancing the clock can run there. The runtime runs a sleeping
// goroutine's timer, or a runnable goroutine, only when a processor passes
// through the scheduler, which a loop of Adds on a machine whose every
// processor is busy does not do: an Add that finds the expiries late gives
// way to them. Of the Adds that find the same lateness, one nudges; if the
// goroutine has still not run nudgeAfter later, the next Add nudges again.
//
// It depends only on the timer's clock, so it is the same on every clock,
// and it does nothing where the goroutine advancing the clock cannot fall
// behind: on a MockTimer's clock nothing polls (MockTimer advances with pollDue),
// and inside a testing/synctest bubble fake time moves only once every
// goroutine is blocked, so the poll wakes before its bucket is late.
// BenchmarkBusyAdderExpiryLateness, and examples/purgatory_perf with
// -timeout 200 -pct50 10000 -pct75 10000 (docs/benchmarks.md, D), show what
// it buys.
func (q *delayQueue) nudge(now int64) {
	at := q.lateAt.Load()
	if now <= at || !q.lateAt.CompareAndSwap(at, now+int64(nudgeAfter)) {
		return
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	runtime.Gosched()
}

// stop makes a wait in progress, and every later one, return false
// without sleeping. It is for a timer that is closing (Close, or a Reaper's
// Close, which closes the timer next), so it is never undone.
func (q *delayQueue) stop() {
	q.mu.Lock()
	if !q.stopped {
		q.stopped = true
		close(q.quit)
	}
	q.mu.Unlock()
}

// clear drops every queued bucket.
func (q *delayQueue) clear() {
	q.mu.Lock()
	for _, b := range q.items {
		b.index = -1
	}
	q.items = nil
	q.mu.Unlock()
}

func (q *delayQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// bucketHeap is a min-heap of buckets by due tick.
type bucketHeap []*bucket

func (h bucketHeap) Len() int           { return len(h) }
func (h bucketHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h bucketHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *bucketHeap) Push(x any) {
	b := x.(*bucket)
	b.index = len(*h)
	*h = append(*h, b)
}

func (h *bucketHeap) Pop() any {
	old := *h
	n := len(old)
	b := old[n-1]
	old[n-1] = nil
	b.index = -1
	*h = old[:n-1]
	return b
}
