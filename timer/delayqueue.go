package timer

import (
	"container/heap"
	"math"
	"sync"
	"time"
)

// delayQueue holds the buckets that have entries, ordered by expiration. It
// plays the part of java.util.concurrent.DelayQueue in Kafka's SystemTimer:
// the goroutine that advances the clock sleeps in poll until the earliest
// bucket is due, so the clock moves only when there is work, never on empty
// ticks.
//
// offer may be called by any goroutine; poll and pollDue by one goroutine at
// a time (SystemTimer serialises them with pollMu).
type delayQueue struct {
	mu    sync.Mutex
	items bucketHeap // guarded by mu

	now      func() time.Duration // the timer's clock
	tickNano int64

	// wake carries a token when a bucket becomes the new head, so that a
	// sleeping poll recomputes its wait. interrupt carries a token asking a
	// poll to give up and return nil. Both hold at most one token.
	wake      chan struct{}
	interrupt chan struct{}

	// timer is the one reusable clock timer poll waits on; no timer or
	// goroutine is ever created per task or per bucket. On the system
	// clock it is a time.Timer, so a poll sleeps on the runtime's timers,
	// and inside a testing/synctest bubble on the bubble's fake time.
	timer ClockTimer
}

func newDelayQueue(now func() time.Duration, clock Clock, tick time.Duration) *delayQueue {
	t := clock.NewTimer(time.Hour)
	t.Stop()
	return &delayQueue{
		now:       now,
		tickNano:  int64(tick),
		wake:      make(chan struct{}, 1),
		interrupt: make(chan struct{}, 1),
		timer:     t,
	}
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
	q.mu.Unlock()
	if head {
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

// poll waits up to timeout for a bucket to be due and returns it, or returns
// nil when the timeout passes or the queue is interrupted.
func (q *delayQueue) poll(timeout time.Duration) *bucket {
	deadline := addSat(q.now(), max(timeout, 0))
	for {
		now := q.now()
		q.mu.Lock()
		wait := deadline - now
		if len(q.items) > 0 {
			headDue := q.dueAt(q.items[0].due)
			if headDue <= now {
				b := heap.Pop(&q.items).(*bucket)
				q.mu.Unlock()
				return b
			}
			wait = min(wait, headDue-now)
		}
		q.mu.Unlock()
		if wait <= 0 {
			return nil
		}
		q.timer.Reset(wait)
		select {
		case <-q.timer.C():
		case <-q.wake:
			q.timer.Stop()
		case <-q.interrupt:
			q.timer.Stop()
			return nil
		}
	}
}

// stop makes a poll in progress, or the next one, return nil at once.
func (q *delayQueue) stop() {
	select {
	case q.interrupt <- struct{}{}:
	default:
	}
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
