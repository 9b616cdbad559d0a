package operation

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/purgatory-go/purgatory/timer"
)

// DelayedOperation is a request that waits until it can complete or its
// timeout passes. Implement it by embedding [Base] in a struct, providing
// TryComplete, OnComplete and OnExpiration, and calling Init once.
type DelayedOperation interface {
	timer.Task

	// TryComplete checks whether the operation can finish now. If it can,
	// it returns ForceComplete(); otherwise false. It is called with the
	// operation's lock held.
	TryComplete() bool

	// OnComplete finishes the operation: it runs exactly once, from the
	// ForceComplete call that won.
	OnComplete()

	// OnExpiration runs after OnComplete when the timeout, not TryComplete
	// or user code, completed the operation.
	OnExpiration()

	// ForceComplete, IsCompleted and OperationBase come from Base.
	ForceComplete() bool
	IsCompleted() bool
	OperationBase() *Base
}

// Errors reported for operations. Check them with [errors.Is].
var (
	// ErrNotInitialised means Init was not called on the operation's Base.
	ErrNotInitialised = errors.New("operation: Base.Init not called")
)

// Base state bits, kept in the TaskBase's spare flags word. Bits 5 and 6
// are the lock (lock.go); the top bits count the operation's live watch
// entries, so that completing it can take them off its Tracker's Watched
// in the same compare-and-swap that completes it.
const (
	stCompleted  uint32 = 1 << iota
	stExpired           // the timeout completed it
	stParked            // counted in a Tracker's Pending
	stTryPending        // a check found the lock held; the holder checks again
	stCustomLock        // h points into a lockedHandle

	watchShift        = 8
	watchOne   uint32 = 1 << watchShift
	// MaxKeys is the most keys one operation can be watched on.
	MaxKeys = 1<<(32-watchShift) - 1
)

// Base gives a DelayedOperation Kafka's semantics. Embed it and call Init
// once, before the operation is used:
//
//	type delayedFetch struct {
//		operation.Base
//		...
//	}
//	f := &delayedFetch{...}
//	f.Init(f, maxWait)
//
// The zero Base is not ready: a purgatory refuses it with ErrNotInitialised.
// A Base must not be copied after Init.
//
// Base is 80 bytes: the timer's 64-byte TaskBase (whose owner field serves
// as the reference to the outer operation, and whose spare word holds
// Base's state and its lock), and pointers to the Tracker of the purgatory
// holding it and to its Handle.
type Base struct {
	timer.TaskBase
	t atomic.Pointer[Tracker] // set by Park
	h atomic.Pointer[Handle]  // set by Park (or Init, for a custom lock)
}

// Handle is what watch lists hold instead of the operation itself. When
// the operation completes its Handle lets go of it, so the operation is
// unreachable from every list at once, without taking a list's lock; the
// 8-byte Handle stays on the lists until they are next compacted (on a
// check of the key, or by the purge). Package watchers and purgatory use
// it; user code does not.
type Handle struct {
	op atomic.Pointer[Base] // nil once the operation has completed
}

// Op returns the operation, or nil once it has completed.
func (h *Handle) Op() *Base { return h.op.Load() }

// lockedHandle carries a lock given to WithLock. Base.h points at its
// first field, so one pointer serves both.
type lockedHandle struct {
	Handle
	lock sync.Locker
}

// Tracker counts what a purgatory's operations report. Package purgatory
// owns one; user code does not need it.
//
// The counters are striped by operation address: a request is usually
// parked on one goroutine and completed on another, and with one set of
// counters every request would bounce their cache line between two cores
// several times. Reads sum the stripes.
type Tracker struct {
	stripes [trackerStripes]trackerStripe

	// OnPanic is called with every recovered panic. It must be set before
	// the Tracker is used and not changed afterwards.
	OnPanic func(op DelayedOperation, callback string, v any)
}

const trackerStripes = 16

type trackerStripe struct {
	pending atomic.Int64  // parked and not yet completed or cancelled
	watched atomic.Int64  // live watch entries: keys of operations not completed
	early   atomic.Uint64 // completed other than by the timeout
	expired atomic.Uint64 // completed by the timeout
	panics  atomic.Uint64 // recovered callback panics
	_       [128 - 40]byte
}

func (t *Tracker) stripe(b *Base) *trackerStripe {
	return &t.stripes[(uintptr(unsafe.Pointer(b))>>7)%trackerStripes]
}

// TrackerCounts is a sum of a Tracker's stripes.
type TrackerCounts struct {
	Pending, Watched       int64
	Early, Expired, Panics uint64
}

// Counts sums the stripes. Each stripe is read atomically; the sum is not
// one snapshot.
func (t *Tracker) Counts() TrackerCounts {
	var c TrackerCounts
	for i := range t.stripes {
		s := &t.stripes[i]
		c.Pending += s.pending.Load()
		c.Watched += s.watched.Load()
		c.Early += s.early.Load()
		c.Expired += s.expired.Load()
		c.Panics += s.panics.Load()
	}
	return c
}

// AddPanic counts a panic recovered outside the operations' own callbacks.
func (t *Tracker) AddPanic() { t.stripes[0].panics.Add(1) }

// InitOption configures Init.
type InitOption interface{ initOption() }

// lockOption is the only InitOption so far. Options are concrete values
// rather than functions applied to a config, so that Init allocates
// nothing: it runs once per request.
type lockOption struct{ lock sync.Locker }

func (lockOption) initOption() {}

// WithLock makes the operation use l instead of its own mutex, so that
// several operations can share one lock (Kafka's lockOpt, used by the group
// coordinator). Prefer a *SharedLock: with it, a callback running under the
// lock may trigger checks of the other operations that share it. With a
// lock that has TryLock but is not a SharedLock, a check that finds the
// lock held by another operation's goroutine is dropped, and waits for the
// next CheckAndComplete. A lock without TryLock is waited for.
func WithLock(l sync.Locker) InitOption { return lockOption{l} }

// Init binds the Base to the operation that embeds it and sets its timeout.
// A timeout of zero or less expires the operation as soon as it is parked.
// Init panics if self is nil or does not embed this Base.
func (b *Base) Init(self DelayedOperation, timeout time.Duration, opts ...InitOption) {
	if self == nil || self.OperationBase() != b {
		panic("operation: Init must be given the operation that embeds this Base")
	}
	var lock sync.Locker
	for _, o := range opts {
		if lo, ok := o.(lockOption); ok {
			lock = lo.lock
		}
	}
	b.Bind(self)
	b.SetDelay(timeout)
	if lock != nil {
		lh := &lockedHandle{lock: lock}
		b.h.Store(&lh.Handle)
		b.flags().Or(stCustomLock)
	}
}

func (b *Base) flags() *atomic.Uint32 { return b.TaskBase.Flags() }

// self returns the operation that embeds b. The timer's owner field holds
// it, so Base needs no field of its own for it.
func (b *Base) self() DelayedOperation { return b.Owner().(DelayedOperation) }

// OperationBase returns b. It lets this module's packages reach the
// bookkeeping of any DelayedOperation.
func (b *Base) OperationBase() *Base { return b }

// Self returns the operation that embeds b, as given to Init.
func (b *Base) Self() DelayedOperation {
	if b.Owner() == nil {
		return nil
	}
	return b.self()
}

// Initialised reports whether Init has been called.
func (b *Base) Initialised() bool { return b.Owner() != nil }

// Lock returns the lock TryComplete runs under.
func (b *Base) Lock() sync.Locker {
	if b.flags().Load()&stCustomLock != 0 {
		return (*lockedHandle)(unsafe.Pointer(b.h.Load())).lock
	}
	return (*opLock)(b)
}

// IsCompleted reports whether the operation has completed, by any path.
func (b *Base) IsCompleted() bool { return b.flags().Load()&stCompleted != 0 }

// IsExpired reports whether the timeout completed the operation.
func (b *Base) IsExpired() bool { return b.flags().Load()&stExpired != 0 }

// ForceComplete completes the operation if nobody has yet: it cancels the
// timeout, lets go of the operation's watch entries, and calls OnComplete.
// It returns true only for the caller that completed it. Unlike sync.Once,
// a caller that loses returns false at once, without waiting for the
// winner's OnComplete to finish.
//
// A panic in OnComplete is recovered and reported to the purgatory (counted
// and logged) when the operation is parked in one; the operation stays
// completed either way.
func (b *Base) ForceComplete() bool { return b.forceComplete(false) }

// forceComplete sets the completed bit, and the expired bit with it when
// the timeout is the one completing, in a single step: the winner alone
// knows how the operation ended.
func (b *Base) forceComplete(expired bool) bool {
	bits := stCompleted
	if expired {
		bits |= stExpired
	}
	f := b.flags()
	var s uint32
	for {
		s = f.Load()
		if s&stCompleted != 0 {
			return false
		}
		// Completing also zeroes the watch count: whatever was counted is
		// taken off the Tracker below, exactly once.
		if f.CompareAndSwap(s, (s|bits)&(watchOne-1)) {
			break
		}
	}
	if n := s >> watchShift; n > 0 {
		if t := b.t.Load(); t != nil {
			t.stripe(b).watched.Add(-int64(n))
		}
	}
	b.Cancel()
	if h := b.h.Load(); h != nil {
		h.op.Store(nil) // off every watch list at once (KAFKA-19389)
	}
	t := b.t.Load()
	b.call(t, b.self().OnComplete, "OnComplete")
	if !expired {
		b.notify(t, false)
	}
	return true
}

// Run is called by the timer when the timeout passes. It takes the
// operation's lock, so that TryComplete, OnComplete and OnExpiration of one
// operation never run at the same time (Kafka fixed a race here in
// KAFKA-19312), then completes the operation and, if that won, calls
// OnExpiration.
func (b *Base) Run() {
	l := b.Lock()
	l.Lock()
	defer l.Unlock()
	if b.forceComplete(true) {
		t := b.t.Load()
		b.call(t, b.self().OnExpiration, "OnExpiration")
		b.notify(t, true)
	}
}

// call runs a user callback, recovering a panic when a purgatory tracks
// the operation, so that one bad callback cannot take down the goroutine
// that was completing many operations.
func (b *Base) call(t *Tracker, f func(), name string) {
	if t == nil {
		f()
		return
	}
	defer func() {
		if r := recover(); r != nil {
			t.recovered(b, name, r)
		}
	}()
	f()
}

func (t *Tracker) recovered(b *Base, callback string, v any) {
	t.stripe(b).panics.Add(1)
	if t.OnPanic != nil {
		t.OnPanic(b.self(), callback, v)
	}
}

func (b *Base) notify(t *Tracker, expired bool) {
	if t == nil || !b.clear(stParked) {
		return
	}
	st := t.stripe(b)
	st.pending.Add(-1)
	if expired {
		st.expired.Add(1)
	} else {
		st.early.Add(1)
	}
}

// clear clears bit and reports whether this call cleared it.
func (b *Base) clear(bit uint32) bool {
	f := b.flags()
	for {
		s := f.Load()
		if s&bit == 0 {
			return false
		}
		if f.CompareAndSwap(s, s&^bit) {
			return true
		}
	}
}

// SafeTryComplete calls TryComplete under the operation's lock unless the
// operation has completed, and reports whether this call completed it.
//
// If another goroutine holds the lock, it does not wait: it leaves a note
// that the holder acts on after unlocking (Kafka's maybeTryComplete). That
// is what keeps a callback that calls CheckAndComplete from deadlocking on
// a lock its own goroutine holds: Go's mutexes are not re-entrant, Kafka's
// are. The note is a flag in the operation for its own lock, and the
// SharedLock's list for a SharedLock.
func (b *Base) SafeTryComplete() bool {
	l := b.Lock()
	tl, ok := l.(interface{ TryLock() bool })
	if !ok {
		l.Lock()
		defer l.Unlock()
		return !b.IsCompleted() && b.tryComplete()
	}
	shared, _ := l.(*SharedLock)
	done := false
	for !b.IsCompleted() {
		if tl.TryLock() {
			b.clear(stTryPending)
			done = !b.IsCompleted() && b.tryComplete()
			l.Unlock()
			// Someone may have left a note while we held the lock.
			if shared != nil || b.flags().Load()&stTryPending == 0 {
				break
			}
			continue
		}
		if shared != nil {
			// The holder checks the list after it unlocks. If it unlocked
			// before we added to the list, the TryLock below succeeds.
			shared.deferCheck(b)
			if !tl.TryLock() {
				break
			}
			l.Unlock() // drains the list, which includes b
			break
		}
		// The holder will see the note after it unlocks. If the note was
		// already there, the holder is bound to see it: no need to retry.
		if b.flags().Or(stTryPending)&stTryPending != 0 {
			break
		}
		// We set the note, but the holder may have unlocked just before:
		// go round again.
	}
	return done
}

// SafeTryCompleteOrElse calls TryComplete under the operation's lock and,
// if that fails, calls f and TryComplete again, still under the lock. The
// purgatory passes as f the function that watches the operation's keys:
// because the lock is held from the first check to the last, a
// CheckAndComplete that runs between them either finds the operation
// watched or is seen by the last check (see the story about the lock in
// package purgatory).
func (b *Base) SafeTryCompleteOrElse(f func()) bool {
	l := b.Lock()
	l.Lock()
	defer b.unlockAndRecheck(l)
	if b.tryComplete() {
		return true
	}
	f()
	return b.tryComplete()
}

// unlockAndRecheck unlocks and, if a check was skipped because we held the
// lock, makes it.
func (b *Base) unlockAndRecheck(l sync.Locker) {
	l.Unlock()
	if b.flags().Load()&(stTryPending|stCompleted) == stTryPending {
		b.SafeTryComplete()
	}
}

func (b *Base) tryComplete() (done bool) {
	if t := b.t.Load(); t != nil {
		defer func() {
			if r := recover(); r != nil {
				t.recovered(b, "TryComplete", r)
				done = false
			}
		}()
	}
	return b.self().TryComplete()
}

// Park prepares the operation to be watched by a purgatory that counts in
// t, and returns the Handle its watch lists will hold. It fails if the
// operation is already parked or completed. Package purgatory calls it.
func (b *Base) Park(t *Tracker) (*Handle, bool) {
	f := b.flags()
	for {
		s := f.Load()
		if s&(stParked|stCompleted) != 0 {
			return nil, false
		}
		if f.CompareAndSwap(s, s|stParked) {
			break
		}
	}
	// A Handle is made per Park and published whole, so that a concurrent
	// ForceComplete sees either no Handle or a complete one, and so that
	// lists still holding the Handle of an earlier Park (after Unpark) do
	// not count towards this one.
	var h *Handle
	if s := f.Load(); s&stCustomLock != 0 {
		lh := &lockedHandle{lock: (*lockedHandle)(unsafe.Pointer(b.h.Load())).lock}
		h = &lh.Handle
	} else {
		h = &Handle{}
	}
	h.op.Store(b)
	b.h.Store(h)
	b.t.Store(t)
	t.stripe(b).pending.Add(1)
	return h, true
}

// AddWatches counts n more watch entries for the operation in its
// Tracker's Watched, unless it has completed. Package purgatory calls it
// before watching the keys; it fails for more than MaxKeys in all.
func (b *Base) AddWatches(n int) bool {
	f := b.flags()
	for {
		s := f.Load()
		if s&stCompleted != 0 || int(s>>watchShift)+n > MaxKeys {
			return false
		}
		if f.CompareAndSwap(s, s+uint32(n)<<watchShift) {
			if t := b.t.Load(); t != nil {
				t.stripe(b).watched.Add(int64(n))
			}
			return true
		}
	}
}

// DropWatches uncounts n watch entries that were removed (by
// CancelForKey) while the operation stays pending.
func (b *Base) DropWatches(n int) {
	f := b.flags()
	for {
		s := f.Load()
		if s&stCompleted != 0 {
			return // completion uncounted them all
		}
		k := min(uint32(n), s>>watchShift)
		if f.CompareAndSwap(s, s-k<<watchShift) {
			if t := b.t.Load(); t != nil {
				t.stripe(b).watched.Add(-int64(k))
			}
			return
		}
	}
}

// Unpark takes the operation out of its purgatory's count without
// completing it (Kafka's cancelForKey): it cancels the timeout and reports
// whether this call did so. The operation stays on the watch lists of its
// other keys, as in Kafka, and may be parked again.
func (b *Base) Unpark() bool {
	b.Cancel()
	if !b.clear(stParked) {
		return false
	}
	if t := b.t.Load(); t != nil {
		t.stripe(b).pending.Add(-1)
	}
	return true
}
