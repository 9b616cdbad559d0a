package timer

import (
	"sync"
	"sync/atomic"
)

// bucket is one slot of a timing wheel: a circular doubly linked list of
// entries, with a sentinel, that all fall into the same span of ticks. It is
// Kafka's TimerTaskList.
//
// Lock order: a bucket's mu is taken after the timer's RWMutex (read or
// write) and is never held while taking another bucket's mu or running a task.
type bucket struct {
	mu   sync.Mutex // guards root and the links of every entry whose list is this bucket
	root TaskBase   // sentinel: root.next is the oldest entry, root.prev the newest

	// expiration is the first tick of the span this bucket holds, or -1 when
	// it has been flushed and waits for reuse. The delay queue reads it
	// without mu.
	expiration atomic.Int64

	// count is the number of linked entries. It changes only under mu and is
	// read without it by Size.
	count atomic.Int64

	// lead is how long before its expiration the bucket is taken from the
	// delay queue: zero at the finest level, where the bucket's tasks run;
	// the bucket's own span above it, where its tasks are moved down a level
	// before any of them is due. Set once at creation.
	lead int64

	// index and due are owned by the delay queue and guarded by its mutex:
	// the position in its heap (-1 when not queued) and the expiration the
	// heap was ordered by.
	index int
	due   int64
}

func (b *bucket) init() {
	b.root.next = &b.root
	b.root.prev = &b.root
	b.expiration.Store(-1)
	b.index = -1
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

// insert links e at the tail if e is in no list and still pending. It reports
// whether e was linked. It is false when a concurrent Cancel won (the caller
// need not do anything) or when e is already in some list (an Add that moved
// it elsewhere got there first).
func (b *bucket) insert(e *TaskBase) bool {
	b.mu.Lock()
	if !e.isPending() || !e.list.CompareAndSwap(nil, b) {
		b.mu.Unlock()
		return false
	}
	tail := b.root.prev
	e.next = &b.root
	e.prev = tail
	tail.next = e
	b.root.prev = e
	b.count.Add(1)
	b.mu.Unlock()
	return true
}

// remove unlinks e if it is still in this bucket.
func (b *bucket) remove(e *TaskBase) {
	b.mu.Lock()
	if e.list.Load() == b {
		b.unlinkLocked(e)
		b.count.Add(-1)
	}
	b.mu.Unlock()
}

// unlinkLocked takes e out of the list. The caller holds b.mu and has checked
// that e.list is b.
func (b *bucket) unlinkLocked(e *TaskBase) {
	e.next.prev = e.prev
	e.prev.next = e.next
	e.next = nil
	e.prev = nil
	e.list.Store(nil)
}

// flush unlinks every entry, appends them to dst in insertion order and
// resets the expiration so that the bucket can be reused for a later span.
// The entries keep their state: the caller decides, entry by entry, whether
// each one moves to a finer wheel, fires, or was cancelled meanwhile.
func (b *bucket) flush(dst []*TaskBase) []*TaskBase {
	b.mu.Lock()
	n := 0
	for e := b.root.next; e != &b.root; e = b.root.next {
		b.unlinkLocked(e)
		dst = append(dst, e)
		n++
	}
	b.count.Add(int64(-n))
	b.expiration.Store(-1)
	b.mu.Unlock()
	return dst
}

// pop unlinks and returns the oldest entry, or nil when the bucket is empty,
// in which case it also resets the expiration so that the bucket can be
// reused. Flushing entry by entry lets the caller reinsert each entry while
// it is still in the cache, instead of walking a large bucket twice.
func (b *bucket) pop() *TaskBase {
	b.mu.Lock()
	e := b.root.next
	if e == &b.root {
		b.expiration.Store(-1)
		b.mu.Unlock()
		return nil
	}
	b.unlinkLocked(e)
	b.count.Add(-1)
	b.mu.Unlock()
	return e
}

// len counts the linked entries. It walks the list, so it is for tests.
func (b *bucket) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for e := b.root.next; e != &b.root; e = e.next {
		n++
	}
	return n
}
