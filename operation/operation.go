package operation

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

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

// Observer is told by a Base when its operation completes or a callback
// panics. Package purgatory implements it to keep its counters; user code
// does not need it.
type Observer interface {
	// Completed is called once per operation, after OnComplete (and
	// OnExpiration, if expired) returned or panicked.
	Completed(expired bool)
	// Recovered is called with the value of a recovered panic from a
	// TryComplete, OnComplete or OnExpiration call.
	Recovered(op DelayedOperation, callback string, v any)
}

// Unwatcher removes an operation from every watch list it is on. Package
// watchers attaches one to a Base; user code does not need it.
type Unwatcher interface{ Unwatch() }

// Base state bits.
const (
	stCompleted uint32 = 1 << iota
	stExpired
	stParked // handed to a purgatory: counted in its NumDelayed
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
type Base struct {
	timer.TaskBase

	self  DelayedOperation
	lock  sync.Locker // &mu unless a shared lock was given
	mu    sync.Mutex
	state atomic.Uint32

	// tryPending is set when a check could not take the lock because
	// someone else held it; the holder checks again after unlocking, so no
	// wake-up is lost (Kafka's maybeTryComplete).
	tryPending atomic.Bool

	// obs and watch are set by the purgatory while it parks the operation.
	// wmu guards watch and orders its setting with completion.
	obs   Observer
	wmu   sync.Mutex
	watch Unwatcher
}

// InitOption configures Init.
type InitOption interface{ apply(*Base) }

type initFunc func(*Base)

func (f initFunc) apply(b *Base) { f(b) }

// WithLock makes the operation use l instead of its own mutex, so that
// several operations can share one lock (Kafka's lockOpt, used by the group
// coordinator). Prefer a *SharedLock: with it, a callback running under the
// lock may trigger checks of the other operations that share it. With a
// lock that has TryLock but is not a SharedLock, a check that finds the
// lock held by another operation's goroutine is dropped, and waits for the
// next CheckAndComplete.
func WithLock(l sync.Locker) InitOption {
	return initFunc(func(b *Base) {
		if l != nil {
			b.lock = l
		}
	})
}

// Init binds the Base to the operation that embeds it and sets its timeout.
// A timeout of zero or less expires the operation as soon as it is parked.
// Init panics if self is nil or does not embed this Base.
func (b *Base) Init(self DelayedOperation, timeout time.Duration, opts ...InitOption) {
	if self == nil || self.OperationBase() != b {
		panic("operation: Init must be given the operation that embeds this Base")
	}
	b.self = self
	b.lock = &b.mu
	b.SetDelay(timeout)
	for _, o := range opts {
		o.apply(b)
	}
}

// OperationBase returns b. It lets this module's packages reach the
// bookkeeping of any DelayedOperation.
func (b *Base) OperationBase() *Base { return b }

// Self returns the operation that embeds b, as given to Init.
func (b *Base) Self() DelayedOperation { return b.self }

// Initialised reports whether Init has been called.
func (b *Base) Initialised() bool { return b.self != nil }

// Lock returns the lock TryComplete runs under.
func (b *Base) Lock() sync.Locker { return b.lock }

// IsCompleted reports whether the operation has completed, by any path.
func (b *Base) IsCompleted() bool { return b.state.Load()&stCompleted != 0 }

// IsExpired reports whether the timeout completed the operation.
func (b *Base) IsExpired() bool { return b.state.Load()&stExpired != 0 }

// ForceComplete completes the operation if nobody has yet: it cancels the
// timeout, takes the operation off every watch list, and calls OnComplete.
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
	for {
		s := b.state.Load()
		if s&stCompleted != 0 {
			return false
		}
		if b.state.CompareAndSwap(s, s|bits) {
			break
		}
	}
	b.Cancel()
	b.detach()
	b.call(b.self.OnComplete, "OnComplete")
	if !expired {
		b.notify(false)
	}
	return true
}

// Run is called by the timer when the timeout passes. It takes the
// operation's lock, so that TryComplete, OnComplete and OnExpiration of one
// operation never run at the same time (Kafka fixed a race here in
// KAFKA-19312), then completes the operation and, if that won, calls
// OnExpiration.
func (b *Base) Run() {
	b.lock.Lock()
	defer b.lock.Unlock()
	b.expire()
}

// expire is Run without the lock. The caller holds b.lock.
func (b *Base) expire() {
	if b.forceComplete(true) {
		b.call(b.self.OnExpiration, "OnExpiration")
		b.notify(true)
	}
}

// call runs a user callback, recovering a panic when a purgatory observes
// the operation, so that one bad callback cannot take down the goroutine
// that was completing many operations.
func (b *Base) call(f func(), name string) {
	if b.obs == nil {
		f()
		return
	}
	defer func() {
		if r := recover(); r != nil {
			b.obs.Recovered(b.self, name, r)
		}
	}()
	f()
}

func (b *Base) notify(expired bool) {
	if b.obs != nil && b.setStateClear(stParked) {
		b.obs.Completed(expired)
	}
}

// setStateClear clears bit and reports whether this call cleared it.
func (b *Base) setStateClear(bit uint32) bool {
	for {
		s := b.state.Load()
		if s&bit == 0 {
			return false
		}
		if b.state.CompareAndSwap(s, s&^bit) {
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
// are. The note is the operation's own flag for its own lock, and the
// SharedLock's list for a SharedLock. A lock given to WithLock that has no
// TryLock method is simply waited for.
func (b *Base) SafeTryComplete() bool {
	tl, ok := b.lock.(interface{ TryLock() bool })
	if !ok {
		b.lock.Lock()
		defer b.lock.Unlock()
		return !b.IsCompleted() && b.tryComplete()
	}
	shared, _ := b.lock.(*SharedLock)
	done := false
	for !b.IsCompleted() {
		if tl.TryLock() {
			b.tryPending.Store(false)
			done = !b.IsCompleted() && b.tryComplete()
			b.lock.Unlock()
			// Someone may have left a note while we held the lock.
			if shared != nil || !b.tryPending.Load() {
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
			b.lock.Unlock() // drains the list, which includes b
			break
		}
		// The holder will see the note after it unlocks. If the note was
		// already there, the holder is bound to see it: no need to retry.
		if b.tryPending.Swap(true) {
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
// watched or is seen by the last check (see the story about locks in
// package purgatory).
func (b *Base) SafeTryCompleteOrElse(f func()) bool {
	b.lock.Lock()
	defer b.unlockAndRecheck()
	if b.tryComplete() {
		return true
	}
	f()
	return b.tryComplete()
}

// unlockAndRecheck unlocks and, if a check was skipped because we held the
// lock, makes it.
func (b *Base) unlockAndRecheck() {
	b.lock.Unlock()
	if b.tryPending.Load() && !b.IsCompleted() {
		b.SafeTryComplete()
	}
}

func (b *Base) tryComplete() (done bool) {
	if b.obs != nil {
		defer func() {
			if r := recover(); r != nil {
				b.obs.Recovered(b.self, "TryComplete", r)
				done = false
			}
		}()
	}
	return b.self.TryComplete()
}

// Park records the observer of a purgatory that is about to watch the
// operation. It fails if the operation is already parked or completed.
// Package purgatory calls it; user code does not.
func (b *Base) Park(obs Observer) bool {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.obs != nil || b.IsCompleted() {
		return false
	}
	b.obs = obs
	b.state.Or(stParked)
	return true
}

// AttachWatch records how to take the operation off its watch lists. It
// reports false, and records nothing, if the operation completed meanwhile:
// the caller must then call u.Unwatch itself. Package watchers calls it.
func (b *Base) AttachWatch(u Unwatcher) bool {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.IsCompleted() {
		return false
	}
	b.watch = u
	return true
}

// Unpark takes back a Park whose operation was never watched (the purgatory
// refused it) so that it can be offered again.
func (b *Base) Unpark() {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.obs = nil
	b.state.And(^stParked)
}

// CancelParked stops counting the operation as delayed without completing
// it (Kafka's cancelForKey): it cancels the timeout and reports whether
// this call took it out of the count.
func (b *Base) CancelParked() bool {
	b.Cancel()
	return b.setStateClear(stParked)
}

// detach takes the operation off every watch list, at completion, so that
// nothing keeps a completed operation reachable until a purge (Kafka's
// KAFKA-19389 ran brokers out of memory that way).
func (b *Base) detach() {
	b.wmu.Lock()
	u := b.watch
	b.watch = nil
	b.wmu.Unlock()
	if u != nil {
		u.Unwatch()
	}
}
