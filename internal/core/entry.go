// Package core is the timer's core, Kafka's timer in one package: the
// entry and bucket list (TimerTaskEntry and TimerTaskList), the buckets,
// the hierarchical wheels, the delay queue, the executor, the clock and
// the engine that advances them (Timer, and Mock for package timer's
// MockTimer). Package timer is a thin public layer over it; the operation
// lifecycle uses it directly, its operations' timeouts being entries too.
// It imports neither.
//
// A timer holds two kinds of entry. A task's Entry (package timer's
// TaskBase, through Base) is linked into its bucket's list, Kafka's way:
// a Cancel unlinks it. An operation's OpEntry (through OpBase) has no
// links: its bucket holds it in a Slot, one word of a chunk, which the
// operation's completion clears (op.go). Base and OpBase promote only
// unexported methods, so nothing of an entry reaches a user's type.
//
// # Ground rules
//
//   - State is the timer's: every change is a compare-and-swap (Cancel and
//     firing need no lock). Aux is the owner's: the timer never touches it
//     (the lifecycle keeps an operation's state there).
//   - An entry's list, next and prev are written only under the mutex of
//     the List it is linked into, and list is set only by a goroutine that
//     holds the entry's add-lock (LockAdd, TryLockAdd), so no two goroutines
//     link one entry at once. list is read without a lock to find which
//     List to lock, then read again under that lock. An OpEntry's current
//     Slot is likewise set only by the holder of its add-lock.
//   - Expire is written by the holder of the add-lock (an Add). Delay is
//     written with a plain store before the entry is shared, and afterwards
//     only by Reschedule, atomically; read it with LoadDelay. Owner is
//     written once, before the entry is first added, and only read after.
package core

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// flags is an entry's state word, which both kinds of entry (Entry,
// OpEntry) have first: the timer's state (stateMask), the add-lock and
// touched.
type flags struct {
	// State holds the timer's state (stateMask), addLock and touched.
	State atomic.Uint32
}

// Entry is one task's place in a timer. The zero Entry has never been
// added.
type Entry struct {
	flags
	// Aux is free for the entry's owner; the timer never reads or writes
	// it.
	Aux atomic.Uint32

	list       atomic.Pointer[list] // the List it is linked into, or nil
	next, prev *Entry               // guarded by list.mu

	// Expire is when the entry is due, in nanoseconds on its timer's
	// clock. The holder of the add-lock writes it; the timer reads it.
	Expire int64
	// Delay is what the next Add measures Expire from, in nanoseconds. It
	// is a plain field, not an atomic.Int64: the store that sets it on a
	// new operation would be a locked instruction on every request (an
	// atomic store is an exchange on amd64), where a plain one is free.
	Delay int64
	// Owner is what embeds the entry: the timer.Task that the timer runs
	// when the entry expires, or an operation, whose expiry target the
	// timer calls instead (ExpirerOf).
	Owner any
}

// Task states, in the low bits of Entry.State.
const (
	stateIdle      uint32 = 0 // never added, or already fired
	statePending   uint32 = 1 // in a List, or between Lists during a flush
	stateCancelled uint32 = 2 // Cancel was called and no Add came after it
	stateMask      uint32 = 3

	// addLock is the licence to link the entry into a List: an Add holds
	// it for the whole of its unlink and link, the reaper while it
	// refiles the entry one level down, and an owner while it decides
	// about a fired entry (HoldAdd). It is held for a few instructions,
	// never across a callback. It is a bit lock (bitlock.go): a goroutine
	// that finds it held sets addWaiters and sleeps until UnlockAdd.
	//
	// It is a bit of the state word rather than a sync.Mutex because a
	// mutex is 8 bytes more in every entry, and so in every TaskBase and
	// operation. Measured at c965c5b beside the same build with a mutex,
	// it moved a timer task from the 64-byte size class to the 80-byte
	// one (BenchmarkHeapPerPendingTask, 64.1 -> 80.1 B a task) and cost
	// 3% of BenchmarkAddCancel and BenchmarkAddCancelNewTask at 1M
	// pending (140.5 -> 144.9 and 191.7 -> 198.3 ns, medians of 3).
	addLock    uint32 = 4
	addWaiters uint32 = 8

	// touched records that the entry has been added, or rescheduled
	// (OpEntry.RescheduleHeld), at least once. It is never cleared: an owner
	// reads it to learn whether somebody has scheduled the entry already
	// (Touched).
	touched uint32 = 16
)

// Touched reports whether the entry has ever been added or rescheduled.
func (f *flags) Touched() bool { return f.State.Load()&touched != 0 }

// LoadDelay reads Delay, which a Reschedule may be writing.
func (e *Entry) LoadDelay() time.Duration { return time.Duration(atomic.LoadInt64(&e.Delay)) }

// IsFired reports whether the entry has fired since it was last added: it
// is neither pending nor cancelled. (An entry never added reports true as
// well; its owner knows it was added.)
func (f *flags) IsFired() bool { return f.State.Load()&stateMask == stateIdle }

// HoldAdd takes the add-lock whatever the entry's state, and changes
// nothing else: an owner holds it to decide about a fired entry (expire
// it, or move its deadline) while no Add, refile or other decision of the
// same entry runs. Release it with UnlockAdd. It is held only across a
// few instructions, never across a callback, so a wait for it is short.
func (f *flags) HoldAdd() {
	for {
		w := f.State.Load()
		if w&addLock == 0 && f.State.CompareAndSwap(w, w|addLock) {
			return
		}
		WaitBit(&f.State, addLock, addWaiters)
	}
}

// Deadline returns when an entry with delay nanoseconds is due if added at
// now: now+delay, math.MaxInt64 if that overflows (a deadline no clock
// reaches), and now for a delay of zero or less.
func Deadline(delay, now int64) int64 {
	switch {
	case delay <= 0:
		return now
	case delay > math.MaxInt64-now:
		return math.MaxInt64
	}
	return now + delay
}

// Base holds an Entry for a type that embeds it. Embedding Base promotes
// only its unexported sealing method, never the Entry's fields or methods.
type Base struct{ e Entry }

func (b *Base) mustEmbedTaskBase() *Entry    { return &b.e }
func (b *Base) mustEmbedTaskBaseSlot() *Slot { return nil }

// Sealed is implemented by every type that embeds a Base, and by *Slot
// (an operation's handle, which the purgatory adds to a timer of the
// user's own).
type Sealed interface {
	mustEmbedTaskBase() *Entry
	mustEmbedTaskBaseSlot() *Slot
}

// EntryOf returns b's Entry.
func EntryOf(b *Base) *Entry { return &b.e }

// Cancel stops the entry from firing. It reports whether this call
// prevented a pending run: false if it was never added, has fired, or was
// cancelled before. It does not wait for a run that has started, nor for
// anything else.
//
// Taking the entry out of its List is the add-lock holder's business, as
// linking it is: a Cancel that unlinked without it could take out the link
// of an Add that came after it (the Add re-pends the entry, moves it to
// another bucket, and the late unlink finds it there: pending in no List,
// never to run). So the swap to cancelled takes the add-lock with it when
// the lock is free, and the Cancel unlinks and lets go; when another
// goroutine holds it, the swap leaves the lock alone, and that holder's
// UnlockAdd, which unlinks an entry that is no longer pending, does it.
func (e *Entry) Cancel() bool {
	st, took, ok := e.cancelSwap()
	if !ok {
		return false
	}
	if took {
		if st == statePending {
			e.Unlink()
		}
		e.releaseAdd()
	}
	return st == statePending
}

// IsCancelled reports whether Cancel was called and no Add came after.
func (f *flags) IsCancelled() bool { return f.State.Load()&stateMask == stateCancelled }

// IsPending reports whether the entry waits in a timer.
func (f *flags) IsPending() bool { return f.State.Load()&stateMask == statePending }

// Fire moves a pending entry to idle. Exactly one caller wins; that caller
// runs the entry.
func (f *flags) Fire() bool {
	for {
		w := f.State.Load()
		if w&stateMask != statePending {
			return false
		}
		if f.State.CompareAndSwap(w, w&^stateMask|stateIdle) {
			return true
		}
	}
}

// LockAdd takes the add-lock and marks the entry pending in one step.
func (f *flags) LockAdd() {
	for {
		w := f.State.Load()
		if w&addLock == 0 && f.State.CompareAndSwap(w, w&^stateMask|statePending|addLock|touched) {
			return
		}
		// Another goroutine is adding the same entry, a reaper refiling
		// it, or its owner deciding about it: a short wait.
		WaitBit(&f.State, addLock, addWaiters)
	}
}

// TryLockAdd takes the add-lock without changing the state, if the entry is
// pending and nobody holds it. The reaper uses it to refile an entry it
// took out of a List: false means the entry was cancelled meanwhile, or
// that an Add of it to another timer holds the lock and will place it.
func (f *flags) TryLockAdd() bool {
	for {
		w := f.State.Load()
		if w&addLock != 0 || w&stateMask != statePending {
			return false
		}
		if f.State.CompareAndSwap(w, w|addLock) {
			return true
		}
	}
}

// UnlockAdd releases the add-lock. If the entry stopped being pending while
// the lock was held (a Cancel, a firing), it first makes sure the entry is
// unlinked: the Cancel may have looked for it before it was linked. It does so before letting go, so that it cannot take out the
// link of an Add that takes the lock after it; a Cancel that comes after
// its look finds the entry linked and unlinks it itself.
//
// The look at the state and the letting go are one compare-and-swap: a
// Cancel that finds the lock held swaps only the state and leaves the
// unlink to the holder, so a Cancel between a plain look and the release
// would leave a cancelled entry linked.
func (e *Entry) UnlockAdd() {
	if !e.releaseIfPending() {
		// Nothing makes it pending again while the lock is held.
		e.Unlink()
		e.releaseAdd()
	}
}

// releaseAdd lets go of the add-lock and wakes whoever waits for it.
func (f *flags) releaseAdd() {
	if old := f.State.And(^(addLock | addWaiters)); old&addWaiters != 0 {
		WakeBit(&f.State)
	}
}

// releaseIfPending lets go of the add-lock if the entry is still pending,
// in one compare-and-swap, and reports whether it did: a Cancel that
// finds the lock held swaps only the state, and leaves what taking the
// entry out needs to the holder, who looks again when this reports false.
func (f *flags) releaseIfPending() bool {
	for {
		w := f.State.Load()
		if w&stateMask != statePending {
			return false
		}
		if f.State.CompareAndSwap(w, w&^(addLock|addWaiters)) {
			if w&addWaiters != 0 {
				WakeBit(&f.State)
			}
			return true
		}
	}
}

// cancelSwap is the swap of Cancel: to cancelled, taking the add-lock
// with it when it is free (took). It reports the state it replaced, and
// whether there was anything to cancel (false for a cancelled entry).
func (f *flags) cancelSwap() (st uint32, took, ok bool) {
	for {
		w := f.State.Load()
		st = w & stateMask
		if st == stateCancelled {
			return st, false, false
		}
		if w&addLock != 0 {
			if f.State.CompareAndSwap(w, w&^stateMask|stateCancelled) {
				return st, false, true
			}
			continue
		}
		if f.State.CompareAndSwap(w, w&^stateMask|stateCancelled|addLock) {
			return st, true, true
		}
	}
}

// Unlink removes the entry from whatever List holds it. The List can
// change under us (a flush, or a move by the holder of the add-lock), so
// look again until it is nil. Once it is nil, only a holder of the
// add-lock can link the entry again.
func (e *Entry) Unlink() {
	for {
		l := e.list.Load()
		if l == nil {
			return
		}
		l.Remove(e)
	}
}

// Linked reports whether the entry is linked into a List.
func (e *Entry) Linked() bool { return e.list.Load() != nil }

// In reports whether the entry is linked into l.
func (e *Entry) In(l *List) bool { return e.list.Load() == &l.list }

// List is a circular doubly linked list of entries with a sentinel and a
// lock of its own: one stripe of a timer bucket. Call Init before use.
type List struct {
	list
	// What a link or an unlink writes (mu, count, root's links) is in the
	// first cache line; the pad keeps Lists in an array on lines of their
	// own.
	_ [128 - unsafe.Sizeof(list{})%128]byte
}

// list is List without its pad. Entries point to it, not to List, so that
// List's pad can be computed: a size that depended on Entry, which pointed
// back to List, would be a cycle.
type list struct {
	mu    sync.Mutex // guards root, count and the links of every entry in the list
	count int64
	root  Entry // sentinel: root.next is the oldest entry, root.prev the newest
	// slots holds the operations' entries of the stripe (op.go), filled
	// in order, each chunk but the last full; guarded by mu.
	slots slotChunks
}

// Init makes l an empty list.
func (l *list) Init() {
	l.root.next = &l.root
	l.root.prev = &l.root
}

// Insert links e at the tail if e is still pending and in no list, and
// reports whether it did: false when a concurrent Cancel won, or when e
// was added to another timer after this one's flush took it out. The
// caller holds e's add-lock, without which nobody links an entry.
func (l *list) Insert(e *Entry) bool {
	l.mu.Lock()
	if !e.IsPending() || e.list.Load() != nil {
		l.mu.Unlock()
		return false
	}
	e.list.Store(l)
	tail := l.root.prev
	e.next = &l.root
	e.prev = tail
	tail.next = e
	l.root.prev = e
	l.count++
	l.mu.Unlock()
	return true
}

// Remove unlinks e if it is still in l.
func (l *list) Remove(e *Entry) {
	l.mu.Lock()
	if e.list.Load() == l {
		l.unlinkLocked(e)
	}
	l.mu.Unlock()
}

func (l *list) unlinkLocked(e *Entry) {
	e.next.prev = e.prev
	e.prev.next = e.next
	e.next = nil
	e.prev = nil
	e.list.Store(nil)
	l.count--
}

// Lock locks l, for PopLocked.
func (l *list) Lock() { l.mu.Lock() }

// Unlock unlocks l.
func (l *list) Unlock() { l.mu.Unlock() }

// PopLocked unlinks and returns the oldest entry, or nil if l is empty.
// The caller holds l's lock.
func (l *list) PopLocked() *Entry {
	e := l.root.next
	if e == &l.root {
		return nil
	}
	l.unlinkLocked(e)
	return e
}

// PopInto moves up to max entries into dst, oldest first, under one lock,
// and returns dst.
func (l *list) PopInto(dst []*Entry, max int) []*Entry {
	l.mu.Lock()
	for n := 0; n < max; n++ {
		e := l.PopLocked()
		if e == nil {
			break
		}
		dst = append(dst, e)
	}
	l.mu.Unlock()
	return dst
}

// Count returns the number of linked entries, read under the lock.
func (l *list) Count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}
