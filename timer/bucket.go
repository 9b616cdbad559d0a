package timer

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// bucket is one slot of a timing wheel: the entries that all fall into the
// same span of ticks (Kafka's TimerTaskList). Its entries are kept in a few
// stripes, picked by the entry's address, each a circular doubly linked list
// with a sentinel and its own lock. A purgatory adds new timeouts and
// cancels completed ones in the same bucket from different goroutines at
// once (with 1s timeouts, every request of a 400 ms window lands in one
// bucket); with one list, every Add and every Cancel would pass the bucket's
// lock and tail between two cores.
//
// Lock order: a stripe's mu is taken after the timer's lock (read or write)
// and is never held while running a task. Only flush, under the timer's
// write lock, holds more than one, taking them in index order; everyone
// else holds one at a time.
type bucket struct {
	stripes [bucketStripes]stripe

	// expiration is the first tick of the span this bucket holds, or -1 when
	// it has been flushed and waits for reuse. The delay queue reads it
	// without a lock.
	expiration atomic.Int64

	// lead is how long before its expiration the bucket is taken from the
	// delay queue: zero at the finest level, where the bucket's tasks run;
	// the bucket's own span above it, where its tasks are moved down a level
	// before any of them is due. Set once at creation.
	lead int64

	// popFrom is the stripe pop looks at first. Used only under the timer's
	// write lock.
	popFrom int

	// index and due are owned by the delay queue and guarded by its mutex:
	// the position in its heap (-1 when not queued) and the tick the heap is
	// ordered by (expiration - lead).
	index int
	due   int64

	// Pads the bucket to a multiple of 128 bytes, so that in a wheel's
	// array every stripe sits alike in its cache lines: the array's start
	// (a line, or 8 bytes into one after the allocator's header) puts the
	// first 48 bytes of each stripe in one line.
	_ [128 - 40]byte
}

const bucketStripes = 4

// stripe is laid out so that what a link or an unlink writes (mu, count,
// root.next and root.prev) is in its first 48 bytes, one cache line: an
// Add on one core and a Cancel on another then pass one line between
// them, not two.
type stripe struct {
	mu    sync.Mutex // guards root and the links of every entry in this stripe
	count int64      // linked entries; guarded by mu
	root  TaskBase   // sentinel: root.next is the oldest entry, root.prev the newest
	_     [128 - 8 - 8 - 64]byte
}

func (b *bucket) init() {
	for i := range b.stripes {
		s := &b.stripes[i]
		s.root.next = &s.root
		s.root.prev = &s.root
	}
	b.expiration.Store(-1)
	b.index = -1
}

func (b *bucket) stripeOf(e *TaskBase) *stripe {
	return &b.stripes[(uintptr(unsafe.Pointer(e))>>6)%bucketStripes]
}

// setExpiration records the bucket's expiration and reports whether it
// changed: only then has the bucket been flushed and reused since it was last
// queued, and only then does it need offering to the delay queue again.
func (b *bucket) setExpiration(tick int64) bool {
	if b.expiration.Load() == tick {
		return false // the common case, and a plain load is cheaper than a swap
	}
	return b.expiration.Swap(tick) != tick
}

// insert links e at the tail of its stripe if e is still pending and in
// no list. It reports whether e was linked: false when a concurrent Cancel
// won, or when e was added to another timer after this one's flush took it
// out. The caller holds e's addLock, without which nobody links an entry,
// so the check and the link need no atomic swap.
func (b *bucket) insert(e *TaskBase) bool {
	s := b.stripeOf(e)
	s.mu.Lock()
	if !e.isPending() || e.list.Load() != nil {
		s.mu.Unlock()
		return false
	}
	e.list.set(b)
	tail := s.root.prev
	e.next = &s.root
	e.prev = tail
	tail.next = e
	s.root.prev = e
	s.count++
	s.mu.Unlock()
	return true
}

// remove unlinks e if it is still in this bucket.
func (b *bucket) remove(e *TaskBase) {
	s := b.stripeOf(e)
	s.mu.Lock()
	if e.list.Load() == b {
		unlinkLocked(e)
		s.count--
	}
	s.mu.Unlock()
}

// unlinkLocked takes e out of its list. The caller holds the mutex of e's
// stripe and has checked that e is in it.
func unlinkLocked(e *TaskBase) {
	e.next.prev = e.prev
	e.prev.next = e.next
	e.next = nil
	e.prev = nil
	e.list.clear()
}

// popInto moves up to max of b's entries into dst and returns it, taking
// each stripe's lock once rather than once an entry. Once every stripe is
// empty it marks b as in no queue, as flush does. The caller holds the
// timer's write lock, so no Add links into b meanwhile; a Cancel may
// unlink.
func (b *bucket) popInto(dst []*TaskBase, max int) []*TaskBase {
	for range bucketStripes {
		s := &b.stripes[b.popFrom]
		s.mu.Lock()
		n := 0
		for e := s.root.next; e != &s.root && n < max; e = s.root.next {
			unlinkLocked(e)
			dst = append(dst, e)
			n++
		}
		if n > 0 {
			s.count -= int64(n)
		}
		s.mu.Unlock()
		if max -= n; max == 0 {
			return dst // this stripe may hold more: start there next time
		}
		b.popFrom = (b.popFrom + 1) % bucketStripes
	}
	b.expiration.Store(-1)
	return dst
}

// flush unlinks every entry and appends them to dst, resetting the
// expiration. The entries keep their state: the caller decides what each
// one becomes.
//
// It takes every stripe's lock, in order, and walks the stripes' lists
// side by side, an entry of each in turn. A due bucket's entries were last
// touched a whole timeout ago, so each step of a list is a cache miss that
// the next step depends on; walked side by side, the processor has one
// such miss in flight for each stripe instead of one in all.
func (b *bucket) flush(dst []*TaskBase) []*TaskBase {
	for i := range b.stripes {
		b.stripes[i].mu.Lock()
	}
	var n [bucketStripes]int64
	for more := true; more; {
		more = false
		for i := range b.stripes {
			s := &b.stripes[i]
			if e := s.root.next; e != &s.root {
				unlinkLocked(e)
				dst = append(dst, e)
				n[i]++
				more = true
			}
		}
	}
	for i := range b.stripes {
		s := &b.stripes[i]
		s.count -= n[i]
		s.mu.Unlock()
	}
	b.expiration.Store(-1)
	return dst
}

// size is the number of linked entries. It takes each stripe's lock in
// turn.
func (b *bucket) size() int64 {
	var n int64
	for i := range b.stripes {
		s := &b.stripes[i]
		s.mu.Lock()
		n += s.count
		s.mu.Unlock()
	}
	return n
}

// len counts the linked entries by walking the lists. It is for tests.
func (b *bucket) len() int {
	n := 0
	for i := range b.stripes {
		s := &b.stripes[i]
		s.mu.Lock()
		for e := s.root.next; e != &s.root; e = e.next {
			n++
		}
		s.mu.Unlock()
	}
	return n
}
