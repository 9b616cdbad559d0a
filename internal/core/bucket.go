package core

import (
	"sync/atomic"
	"unsafe"
)

// bucket is one slot of a timing wheel: the entries that all fall into the
// same span of ticks (Kafka's TimerTaskList). Its entries are kept in a few
// stripes, picked by the entry's address, each a List with its own
// lock. A purgatory adds new timeouts and cancels completed ones in the same
// bucket from different goroutines at once (with 1s timeouts, every request
// of a 400 ms window lands in one bucket); with one list, every Add and every
// Cancel would pass the bucket's lock and tail between two cores.
//
// Lock order: a stripe's lock is taken after the timer's lock (read or
// write) and is never held while running a task. Only flush, under the
// timer's write lock, holds more than one, taking them in index order;
// everyone else holds one at a time.
type bucketFields struct {
	stripes [bucketStripes]List

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
}

// bucket pads bucketFields to a multiple of 128 bytes, so that in a
// wheel's array every stripe sits alike in its cache lines.
type bucket struct {
	bucketFields
	_ [128 - unsafe.Sizeof(bucketFields{})%128]byte
}

const bucketStripes = 4

func (b *bucket) init() {
	for i := range b.stripes {
		b.stripes[i].Init()
	}
	b.expiration.Store(-1)
	b.index = -1
}

// stripeOf picks e's stripe by its address: hashing an address to spread
// the lock, nothing more.
func (b *bucket) stripeOf(e *Entry) *List { return &b.stripes[entryIndex(e)%bucketStripes] }

// setExpiration records the bucket's expiration and reports whether it
// changed: only then has the bucket been flushed and reused since it was last
// queued, and only then does it need offering to the delay queue again.
func (b *bucket) setExpiration(tick int64) bool {
	if b.expiration.Load() == tick {
		return false // the common case, and a plain load is cheaper than a swap
	}
	return b.expiration.Swap(tick) != tick
}

// insert links e into its stripe; see List.Insert.
func (b *bucket) insert(e *Entry) bool { return b.stripeOf(e).Insert(e) }

// popInto moves up to max of b's entries into dst and returns it, taking
// each stripe's lock once rather than once an entry. Once every stripe is
// empty it marks b as in no queue, as flush does. The caller holds the
// timer's write lock, so no Add links into b meanwhile; a Cancel may
// unlink.
func (b *bucket) popInto(dst []*Entry, max int) []*Entry {
	for range bucketStripes {
		before := len(dst)
		dst = b.stripes[b.popFrom].PopInto(dst, max)
		if max -= len(dst) - before; max == 0 {
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
func (b *bucket) flush(dst []*Entry) []*Entry {
	for i := range b.stripes {
		b.stripes[i].Lock()
	}
	for more := true; more; {
		more = false
		for i := range b.stripes {
			if e := b.stripes[i].PopLocked(); e != nil {
				dst = append(dst, e)
				more = true
			}
		}
	}
	for i := range b.stripes {
		b.stripes[i].Unlock()
	}
	b.expiration.Store(-1)
	return dst
}

// size is the number of linked entries and of pending entries at their
// current slots. It takes each stripe's lock in turn.
func (b *bucket) size() int64 {
	var n int64
	for i := range b.stripes {
		n += b.stripes[i].Count() + b.stripes[i].countSlots()
	}
	return n
}

// holds reports whether e is linked into one of b's stripes. It is for
// tests.
func (b *bucket) holds(e *Entry) bool {
	for i := range b.stripes {
		if e.In(&b.stripes[i]) {
			return true
		}
	}
	return false
}
