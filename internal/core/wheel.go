package core

import (
	"math"
	"sync"
	"sync/atomic"
)

// wheel is one level of the hierarchy: Kafka's TimingWheel, counted in ticks
// of the lowest level rather than in milliseconds, with one change: a level
// has 2n buckets while the next level's tick is n of this level's ticks, so
// each level reaches two buckets of the next level ahead instead of one.
// That overlap lets a coarse bucket be moved down a whole span before it is
// due, a little at a time, instead of all at once when its first entries
// are due (see Timer.turn).
//
// Concurrency contract, as in Kafka: any number of add calls may run at once
// (the Timer holds its read lock for them), but none while advance runs
// (it holds the write lock). current is therefore a plain field.
type wheel struct {
	tick     int64   // ticks of the lowest level per bucket of this one
	interval int64   // how far ahead this level reaches: 2 × nextTick, saturated at MaxInt64
	nextTick int64   // the next level's tick: n × tick, saturated at MaxInt64
	current  int64   // start of the current bucket's span, a multiple of tick
	perTick  divisor // divides by tick
	perSize  divisor // divides by len(buckets)

	buckets []bucket
	queue   *delayQueue

	// overflow is the next, coarser level, created by the first add that
	// needs it. Adds race to create it, hence the atomic and growMu.
	overflow atomic.Pointer[wheel]
	growMu   sync.Mutex
}

// newWheel makes a level of 2n buckets of tick base ticks each.
func newWheel(tick int64, n int, start int64, queue *delayQueue) *wheel {
	w := &wheel{
		tick:     tick,
		interval: math.MaxInt64,
		nextTick: math.MaxInt64,
		current:  start - start%tick,
		perTick:  newDivisor(tick),
		perSize:  newDivisor(int64(2 * n)),
		buckets:  make([]bucket, 2*n),
		queue:    queue,
	}
	if tick <= math.MaxInt64/int64(2*n) {
		w.nextTick = tick * int64(n)
		w.interval = 2 * w.nextTick
	}
	// A bucket of the finest level is due when its span starts; a coarser
	// one a span earlier, to be moved down before its entries are due.
	lead := int64(0)
	if tick > 1 {
		lead = tick
	}
	for i := range w.buckets {
		w.buckets[i].init()
		w.buckets[i].lead = lead
	}
	return w
}

// top reports whether this level already spans every representable tick, so
// that it never needs an overflow level.
func (w *wheel) top() bool { return w.nextTick == math.MaxInt64 }

// add places e, due at tick exp, in the bucket of the finest level whose
// span holds it, unless a concurrent Cancel won (see bucket.insert). It
// reports whether e is already due instead: it is not linked, and the
// caller fires it. The caller holds e's addLock.
func (w *wheel) add(e *Entry, exp int64) (due bool) {
	for {
		if exp-w.current < w.tick {
			return true
		}
		if w.top() || exp-w.current < w.interval {
			vid := w.perTick.div(exp)
			b := &w.buckets[w.perSize.mod(vid)]
			if !b.insert(e) {
				return false
			}
			// A changed expiration means the bucket was flushed and is being
			// reused for a later span: queue it again. Within one span every
			// add sets the same value, so a bucket is queued once per span.
			if b.setExpiration(vid * w.tick) {
				w.queue.offer(b)
			}
			return false
		}
		w = w.overflowWheel()
	}
}

// addDue places e, which is due already, in the finest level's bucket of
// the current tick: that bucket is due at once, so the next turn of the
// goroutine advancing the timer fires e. The caller holds e's addLock and
// the timer's read lock, so current does not move meanwhile.
func (w *wheel) addDue(e *Entry) {
	b := &w.buckets[w.perSize.mod(w.current)]
	if b.insert(e) && b.setExpiration(w.current) {
		w.queue.offer(b)
	}
}

// overflowWheel returns the next level, creating it if need be. The
// common case, the level exists, inlines; creating it (growOverflow) does
// not, and would keep the whole from inlining.
func (w *wheel) overflowWheel() *wheel {
	if o := w.overflow.Load(); o != nil {
		return o
	}
	return w.growOverflow()
}

func (w *wheel) growOverflow() *wheel {
	w.growMu.Lock()
	defer w.growMu.Unlock()
	if o := w.overflow.Load(); o != nil {
		return o
	}
	o := newWheel(w.nextTick, len(w.buckets)/2, w.current, w.queue)
	w.overflow.Store(o)
	return o
}

// advance moves this level, and the coarser ones, to the span holding tick.
// The caller holds the timer's write lock.
func (w *wheel) advance(tick int64) {
	for ; w != nil; w = w.overflow.Load() {
		if tick-w.current < w.tick {
			return
		}
		w.current = tick - w.perTick.mod(tick)
		tick = w.current
	}
}

// levels calls f for every level, finest first.
func (w *wheel) levels(f func(*wheel)) {
	for ; w != nil; w = w.overflow.Load() {
		f(w)
	}
}
