package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// An operation's timeout is an OpEntry, which a timer holds in a Slot: one
// word of a chunk that its bucket's stripe fills in order, rather than a
// link in the stripe's list as a task's Entry is. The operation's
// completion clears the slot (Leave), which releases the operation from
// the timer at once, with no lock and nothing written but that word; the
// bucket skips the cleared word when it is due or moved down.
//
// The first slot an operation gets is also its handle (Handle): what its
// watch lists hold, and what its completion clears. So a parked operation
// costs the timer and its lists one word besides the lists' own, where a
// linked entry costs three (list, next, prev) and a handle of its own two
// more, and an OpEntry is 56 bytes where an Entry is 64: an operation with
// no fields of its own fits the allocator's 64-byte class, and its park
// allocates nothing but the operation (and, one park in 16, its bucket
// stripe a chunk of slots).
// BenchmarkHeapPerParkedOperation measures it.
//
// A timeout that moves (a reset, a coarse bucket moved down a level) gets
// a new slot, its current one (cur); the old slot is cleared, unless it
// is the handle, which the watch lists still hold: a bucket that meets a
// slot whose entry's current slot is another one skips it, and Size
// counts an entry once, at its current slot.
//
// Moving a slot and leaving race only through the entry's state: a mover
// holds the add-lock while the entry is pending, and publishes the new
// slot before it lets go; a Leave comes after the Cancel, which either
// finds the lock free and takes it, or leaves the holder to see the entry
// cancelled as it lets go (UnlockAdd), and clear the slot it published.

// OpEntry is one operation's timeout. The zero OpEntry has never been
// added.
type OpEntry struct {
	flags
	// Aux is free for the entry's owner; the timer never reads or writes
	// it.
	Aux atomic.Uint32
	// Expire, Delay and Owner are as in Entry.
	Expire int64
	Delay  int64
	Owner  any
	// h is the entry's handle: the slot of its first add, or one its
	// owner gave it (SetHandle). Set once, by the holder of the add-lock
	// or the owner before the entry is shared; cleared by Leave.
	h atomic.Pointer[Slot]
	// cur is the slot in a bucket that holds the timeout now, or nil.
	// Written by the holder of the add-lock, and by Leave.
	cur atomic.Pointer[Slot]
}

// LoadDelay reads Delay, which a Reschedule may be writing.
func (e *OpEntry) LoadDelay() time.Duration { return time.Duration(atomic.LoadInt64(&e.Delay)) }

// Handle returns the entry's handle, or nil before its first add and once
// it has left.
func (e *OpEntry) Handle() *Slot {
	if h := e.h.Load(); h != &gone {
		return h
	}
	return nil
}

// gone is the handle of an entry that has left (Leave): not nil, so that
// a mover that comes after does not make its new slot the handle.
var gone Slot

// SetHandle gives the entry a handle of its owner's, for a timer that
// keeps no slots (a Timer of a user's own, or none). The owner calls it
// before it shares the entry, and before any add.
func (e *OpEntry) SetHandle(s *Slot) {
	s.e.Store(e)
	e.h.Store(s)
}

// Cancel stops the entry from firing, as Entry.Cancel does, and clears
// its current slot unless that is its handle. It reports whether this
// call prevented a pending run.
func (e *OpEntry) Cancel() bool {
	st, took, ok := e.cancelSwap()
	if !ok {
		return false
	}
	if took {
		e.dropCur()
		e.releaseAdd()
	}
	return st == statePending
}

// UnlockAdd releases the add-lock. If the entry stopped being pending
// while the lock was held (a Cancel, a RescheduleHeld), it first clears
// the slot the holder published, as Entry.UnlockAdd unlinks.
func (e *OpEntry) UnlockAdd() {
	if !e.releaseIfPending() {
		e.dropCur()
		e.releaseAdd()
	}
}

// RescheduleHeld gives the entry a new delay and cancels it: the caller
// adds it again, and the add measures the delay from its own reading of
// the clock (an add moves nothing that is cancelled, it places it anew).
// A run that fired before it finds the entry no longer fired. The caller
// holds the add-lock (HoldAdd), so that an add (or a refile by the timer)
// of the same entry reads either the old delay or the new one; its
// UnlockAdd takes the entry out of its slot.
func (e *OpEntry) RescheduleHeld(delay time.Duration) {
	for {
		w := e.State.Load()
		if e.State.CompareAndSwap(w, w&^stateMask|stateCancelled|touched) {
			break
		}
	}
	atomic.StoreInt64(&e.Delay, int64(delay))
}

// pendHeld makes the entry pending (and touched) if it has never been
// added or rescheduled, or, with moving, if it is pending already. It
// reports whether it did: not for an entry added since (without moving),
// one that has fired (its run under way decides), or one cancelled (by its
// owner's completion, which may come at any moment: it swaps the state
// even while the add-lock is held, and must not be undone). The caller
// holds the add-lock.
func (e *OpEntry) pendHeld(moving bool) bool {
	for {
		w := e.State.Load()
		switch st := w & stateMask; {
		case st == stateCancelled:
			return false
		case w&touched == 0: // never added: a first add
		case !moving || st != statePending: // fired, or added since
			return false
		}
		if e.State.CompareAndSwap(w, w&^stateMask|statePending|touched) {
			return true
		}
	}
}

// dropCur takes the entry out of its current slot, unless that slot is
// its handle (the watch lists' until Leave).
func (e *OpEntry) dropCur() {
	if c := e.cur.Swap(nil); c != nil && c != e.h.Load() {
		c.e.CompareAndSwap(e, nil)
	}
}

// publish makes s the entry's current slot, clearing the one it had
// (unless that is its handle), and its handle if it has none (never had:
// an entry that has left has gone). The caller holds the add-lock.
func (e *OpEntry) publish(s *Slot) {
	e.h.CompareAndSwap(nil, s)
	if old := e.cur.Swap(s); old != nil && old != e.h.Load() {
		old.e.CompareAndSwap(e, nil)
	}
}

// Leave lets go of the entry's slots, its handle and its current one:
// nothing of the timer's, and no watch list, holds the operation any more,
// and the operation holds nothing of the timer's. The owner calls it once
// the operation has left (after Cancel); it may be called again.
func (e *OpEntry) Leave() {
	if h := e.h.Swap(&gone); h != nil {
		h.e.CompareAndSwap(e, nil)
	}
	if c := e.cur.Swap(nil); c != nil {
		c.e.CompareAndSwap(e, nil)
	}
}

// current reports whether s is e's current slot.
func (e *OpEntry) current(s *Slot) bool { return e.cur.Load() == s }

// Slot holds an operation's entry for a timer's bucket, or its watch
// lists, until the operation leaves. A *Slot is a timer.Task: the handle
// the purgatory adds to a Timer of the user's own, whose Run expires the
// operation.
type Slot struct{ e atomic.Pointer[OpEntry] }

func (s *Slot) mustEmbedTaskBase() *Entry    { return nil }
func (s *Slot) mustEmbedTaskBaseSlot() *Slot { return s }

// Entry returns the entry s holds, or nil once it has left.
func (s *Slot) Entry() *OpEntry { return s.e.Load() }

// Run expires the operation s holds, if it still holds one: the Task's
// Run, for a Timer of the user's own.
func (s *Slot) Run() {
	if e := s.e.Load(); e != nil {
		if x := ExpirerOf(e); x != nil {
			x.ExpireEntry(e, false)
		}
	}
}

// Expirer expires the entries of the operations that one owner parks. The
// owner sets it on each operation's OpBase before adding the entry to a
// timer, and the timer calls ExpireEntry for the entry when it fires
// (fired: the entry's state says which deadline fired); a Timer of the
// user's own calls it through the handle's Run (not fired: the state is
// not that timer's).
type Expirer interface{ ExpireEntry(e *OpEntry, fired bool) }

// Target is the constraint on an OpBase's target: a pointer to T that is
// an Expirer.
type Target[T any] interface {
	*T
	Expirer
}

// OpBase holds an operation's OpEntry and its expiry target, a *T that is
// an Expirer. Like Base, embedding it promotes only an unexported method.
// The target is a typed pointer, not an Expirer, so that it costs one
// word; its owner reads it back as its own type (TargetOf). OpBase is 64
// bytes.
type OpBase[T any, PT Target[T]] struct {
	e      OpEntry
	target atomic.Pointer[T]
}

func (b *OpBase[T, PT]) coreOp() (*OpEntry, Expirer) {
	t := b.target.Load()
	if t == nil {
		return &b.e, nil
	}
	return &b.e, PT(t)
}

// EntryOfOp returns b's OpEntry.
func EntryOfOp[T any, PT Target[T]](b *OpBase[T, PT]) *OpEntry { return &b.e }

// SetTarget makes t the expiry target of b's entry.
func SetTarget[T any, PT Target[T]](b *OpBase[T, PT], t PT) { b.target.Store((*T)(t)) }

// SwapTarget replaces b's target old with t, and reports whether it did.
func SwapTarget[T any, PT Target[T]](b *OpBase[T, PT], old, t PT) bool {
	return b.target.CompareAndSwap((*T)(old), (*T)(t))
}

// TargetOf returns the expiry target set on b, or nil.
func TargetOf[T any, PT Target[T]](b *OpBase[T, PT]) PT { return PT(b.target.Load()) }

// ExpirerOf returns the expiry target of e, an operation's entry, whose
// Owner embeds the OpBase that holds it; nil if it has none.
func ExpirerOf(e *OpEntry) Expirer {
	s, ok := e.Owner.(interface{ coreOp() (*OpEntry, Expirer) })
	if !ok {
		return nil
	}
	if oe, x := s.coreOp(); oe == e {
		return x
	}
	return nil
}

// slotChunkLen is how many slots a chunk holds (128 bytes): a chunk is
// kept by whatever still points into it (a handle on a watch list, an
// entry's current slot, one entry pending in a far bucket), so it is
// small. With 1% of a far bucket's operations pending, spread evenly,
// 85% of 16-slot chunks are clear and dropped, against 53% of 64-slot
// ones (TestFarBucketDropsDeadChunks); a chunk is allocated every 16
// timeouts.
const slotChunkLen = 16

type slotChunk [slotChunkLen]Slot

// slotChunks are a bucket stripe's slots: chunks filled in order, all full
// but the last, whose first n are filled. Guarded by the stripe's lock.
//
// A bucket whose span is far off (a 30-second timeout's) is filled for a
// long while before it is due, and most of the operations whose timeouts
// it holds complete early, clearing their slots. So that what it keeps
// follows the operations pending, not all those parked since it was last
// due, a stripe drops the chunks whose every slot is clear (dropDead)
// each time its chunks have doubled since the last such sweep: each slot
// is looked at O(1) times, amortised. A chunk with one slot still held
// stays; chunks are small (16 slots) so that few are.
type slotChunks struct {
	chunks []*slotChunk
	n      int
	swept  int // len(chunks) after the last sweep
}

// add fills the next slot with e and returns it.
func (c *slotChunks) add(e *OpEntry) *Slot {
	if len(c.chunks) == 0 || c.n == slotChunkLen {
		if len(c.chunks) >= max(2*c.swept, 8) {
			c.dropDead()
		}
		c.chunks = append(c.chunks, new(slotChunk))
		c.n = 0
	}
	s := &c.chunks[len(c.chunks)-1][c.n]
	c.n++
	s.e.Store(e)
	return s
}

// dropDead drops the full chunks whose every slot is clear, and notes how
// many are left. A cleared slot may still be pointed to (a tombstone on a
// watch list holds its chunk); the timer lets go of it.
func (c *slotChunks) dropDead() {
	kept := c.chunks[:0]
	for _, ch := range c.chunks {
		if !ch.dead() {
			kept = append(kept, ch)
		}
	}
	clear(c.chunks[len(kept):])
	c.chunks, c.swept = kept, len(kept)
}

// dead reports whether no slot of ch holds an entry.
func (ch *slotChunk) dead() bool {
	for i := range ch {
		if ch[i].e.Load() != nil {
			return false
		}
	}
	return true
}

// take returns the chunks and empties c. A slot past the last one filled
// is empty, so whoever reads them reads every slot of every chunk.
func (c *slotChunks) take() []*slotChunk {
	ch := c.chunks
	c.chunks, c.n, c.swept = nil, 0, 0
	return ch
}

// eachCurrent calls f for every slot of chunks that holds an entry whose
// current slot it is and which is pending.
func eachCurrent(chunks []*slotChunk, f func(*Slot, *OpEntry)) {
	for _, ch := range chunks {
		for i := range ch {
			s := &ch[i]
			if e := s.e.Load(); e != nil && e.current(s) && e.IsPending() {
				f(s, e)
			}
		}
	}
}

// addSlot fills a slot of e's stripe of b. The caller holds a read lock of
// the timer and e's add-lock.
func (b *bucket) addSlot(e *OpEntry) *Slot {
	l := &b.stripes[opIndex(e)%bucketStripes]
	l.mu.Lock()
	s := l.slots.add(e)
	l.mu.Unlock()
	return s
}

// countSlots counts the pending entries whose current slot is one of l's,
// under l's lock.
func (l *list) countSlots() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	eachCurrent(l.slots.chunks, func(*Slot, *OpEntry) { n++ })
	return n
}

// takeSlots takes every slot chunk out of b's stripes and appends them to
// dst. The caller holds the timer's write lock, which excludes every
// goroutine that fills a slot (they hold a read lock) or counts them
// (Size), so it takes no stripe lock.
func (b *bucket) takeSlots(dst []*slotChunk) []*slotChunk {
	for i := range b.stripes {
		if l := &b.stripes[i]; len(l.slots.chunks) > 0 {
			dst = append(dst, l.slots.take()...)
		}
	}
	return dst
}

// AddOp adds the timeout of an operation's entry e, measured from now and
// its delay, as Add adds a task's, and returns e's handle: the slot of
// its first add. If e has been added already (by a Reschedule, made while
// its owner's park was under way), it adds nothing: the Reschedule's
// deadline stands.
func (t *Timer) AddOp(e *OpEntry) (*Slot, error) {
	if t.shut.Load() {
		return nil, ErrClosed
	}
	mu := t.mu.stripe(opIndex(e))
	mu.RLock()
	if t.closed {
		mu.RUnlock()
		return nil, ErrClosed
	}
	e.HoldAdd()
	if !e.pendHeld(false) {
		// Added by a reschedule since the park (its deadline stands), or
		// cancelled by the operation's completion.
		e.UnlockAdd()
		mu.RUnlock()
		return e.Handle(), nil
	}
	t.fileOp(e, int64(e.LoadDelay()), mu)
	return e.Handle(), nil
}

// addSlot adds the entry held by s, an operation's handle that a purgatory
// gave Add (the timer is not its engine, but a Timer of the user's made
// of one): a slot of a bucket holds the entry too, as its current slot.
func (t *Timer) addSlot(s *Slot) error {
	e := s.Entry()
	if e == nil {
		return nil // the operation has left
	}
	mu := t.mu.stripe(opIndex(e))
	mu.RLock()
	if t.closed {
		mu.RUnlock()
		return ErrClosed
	}
	e.LockAdd()
	t.fileOp(e, int64(e.LoadDelay()), mu)
	return nil
}

// fileOp ends an add of e's timeout, the caller holding mu's read lock and
// e's add-lock: it reads the clock, gives e the deadline delay from it,
// files e there (placeOp), lets go of both locks and, if the goroutine
// advancing the clock is late, nudges it. Reading the clock and filing
// under the read lock make the two one step for a turn (see turn).
func (t *Timer) fileOp(e *OpEntry, delay int64, mu *sync.RWMutex) {
	now := int64(t.now())
	if t.hooks != nil && t.hooks.clockRead != nil {
		t.hooks.clockRead()
	}
	e.Expire = Deadline(delay, now)
	t.placeOp(e, now)
	e.UnlockAdd()
	mu.RUnlock()
	if t.queue.late(now) {
		t.queue.nudge(now)
	}
}

// placeOp files e at e.Expire: in the current tick's bucket if it is due
// at now, in never if no clock reaches it, in its bucket otherwise; and
// makes the slot its current one. The caller holds e's add-lock, and the
// timer's lock (read, or write for a turn's move down).
func (t *Timer) placeOp(e *OpEntry, now int64) {
	var s *Slot
	switch tick := t.tickOf(e.Expire); {
	case e.Expire <= now:
		s = t.wheel.addDueSlot(e)
	case tick == never:
		t.never.Lock()
		s = t.never.slots.add(e)
		t.never.Unlock()
	default:
		s = t.wheel.addSlot(e, tick)
		if s == nil {
			s = t.wheel.addDueSlot(e)
		}
	}
	e.publish(s)
}

// Reschedule gives the pending operation's entry e the delay delay,
// measured from one reading of the clock, and moves it there, in one
// step: under a read lock of the timer (so that no turn comes between
// its leaving its old slot and filling a new one) and its add-lock,
// which an expiry's decision also holds. It reports false, changing
// nothing, if the timer is closed, if g says no, or if the entry has
// fired (its run is under way and decides: a reset that came too late).
// An entry never added is added (the reset of an operation whose park
// has not added its timeout yet; the park then stands aside: AddOp).
func (t *Timer) Reschedule(e *OpEntry, delay time.Duration, g Guard) bool {
	if t.shut.Load() {
		return false
	}
	mu := t.mu.stripe(opIndex(e))
	mu.RLock()
	if t.closed {
		mu.RUnlock()
		return false
	}
	e.HoldAdd()
	if !g.Reschedulable() || !e.pendHeld(true) {
		e.UnlockAdd()
		mu.RUnlock()
		return false
	}
	atomic.StoreInt64(&e.Delay, int64(delay))
	t.fileOp(e, int64(delay), mu)
	return true
}

// Guard says whether an entry may still be rescheduled, asked under its
// add-lock: an operation's lifecycle, which answers false once the
// operation has completed or been cancelled.
type Guard interface{ Reschedulable() bool }

// refileSlot moves the entry s holds one level finer, or fires it if it
// is due, if s is still its current slot and it is pending. The caller
// holds the write lock.
func (t *Timer) refileSlot(s *Slot, e *OpEntry) {
	if !e.TryLockAdd() {
		return // cancelled meanwhile, or being added anew: that Add places it
	}
	if e.current(s) {
		if ns := t.wheel.addSlot(e, t.tickOf(e.Expire)); ns != nil {
			e.publish(ns)
		} else if e.Fire() {
			t.expireOp(e)
		}
	}
	e.UnlockAdd()
}

// fireSlot fires the entry s holds if s is its current slot and it is
// pending, and queues its expiry. The caller holds the write lock.
func (t *Timer) fireSlot(s *Slot, e *OpEntry) {
	if e.current(s) && e.Fire() {
		t.expireOp(e)
	}
}

// addSlot places e, due at tick exp, in the bucket of the finest level
// whose span holds it, as add places an Entry, and returns its slot; nil
// if it is already due. The caller holds e's add-lock.
func (w *wheel) addSlot(e *OpEntry, exp int64) *Slot {
	for {
		if exp-w.current < w.tick {
			return nil
		}
		if w.top() || exp-w.current < w.interval {
			vid := w.perTick.div(exp)
			b := &w.buckets[w.perSize.mod(vid)]
			s := b.addSlot(e)
			if b.setExpiration(vid * w.tick) {
				w.queue.offer(b)
			}
			return s
		}
		w = w.overflowWheel()
	}
}

// addDueSlot places e, which is due already, in the finest level's bucket
// of the current tick, as addDue does an Entry.
func (w *wheel) addDueSlot(e *OpEntry) *Slot {
	b := &w.buckets[w.perSize.mod(w.current)]
	s := b.addSlot(e)
	if b.setExpiration(w.current) {
		w.queue.offer(b)
	}
	return s
}
