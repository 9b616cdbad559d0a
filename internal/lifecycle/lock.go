package lifecycle

import (
	"sync"

	"github.com/purgatory-go/purgatory/internal/core"
)

// An operation's own lock is a bit lock (internal/core's bitlock.go):
// two bits of its state word (stLocked, stWaiters), not a sync.Mutex. The
// mutex's 8 bytes made Op 88 bytes and moved an operation with no fields
// of its own from the allocator's 80-byte size class to the 96-byte one.
// Measured beside 54855e4, the same code with a sync.Mutex,
// BenchmarkHeapPerParkedOperation gave 124 B against 138.7-142 B a parked
// operation (medians of 3 and 5), and perf run C's CPU per request was the
// same within noise. It is rarely contended: two checks of one operation
// at once, or a check and its expiry.

// opLock is an Op seen as a sync.Locker for its own lock. Converting an
// *Op to it allocates nothing.
type opLock Op

func (l *opLock) op() *Op { return (*Op)(l) }

// TryLock locks the operation's own lock if it is free.
func (l *opLock) TryLock() bool {
	w := l.op().word()
	for {
		s := w.Load()
		if s&stLocked != 0 {
			return false
		}
		if w.CompareAndSwap(s, s|stLocked) {
			return true
		}
	}
}

// Lock locks the operation's own lock. If it is held, Lock runs the
// Tracker's Contended hook (tests only) and sleeps until the holder's
// Unlock wakes it.
func (l *opLock) Lock() {
	if l.TryLock() {
		return
	}
	o := l.op()
	// Only a parked operation's Tracker may be read (see complete).
	if o.word().Load()&stParked != 0 {
		if hk := o.tracker().Hooks; hk != nil && hk.Contended != nil {
			hk.Contended(o)
		}
	}
	for !l.TryLock() {
		core.WaitBit(o.word(), stLocked, stWaiters)
	}
}

// Unlock unlocks the operation's own lock and wakes any waiters.
func (l *opLock) Unlock() {
	o := l.op()
	old := o.word().And(^(stLocked | stWaiters))
	if old&stLocked == 0 {
		panic("operation: unlock of unlocked operation lock")
	}
	if old&stWaiters != 0 {
		core.WakeBit(o.word())
	}
}

// lock returns the lock TryComplete runs under: the one given to WithLock,
// or the operation's own.
func (o *Op) lock() sync.Locker {
	if fh := o.fat(); fh != nil && fh.lock != nil {
		return fh.lock
	}
	return (*opLock)(o)
}

// Lock returns the lock the operation's TryComplete runs under.
func Lock(o *Op) sync.Locker { return o.lock() }

// clear clears bit and reports whether this call cleared it.
func (o *Op) clear(bit uint32) bool {
	w := o.word()
	for {
		s := w.Load()
		if s&bit == 0 {
			return false
		}
		if w.CompareAndSwap(s, s&^bit) {
			return true
		}
	}
}

// checkable reports whether a check may run TryComplete: the operation is
// parked and has not completed. Read under the lock, it cannot change
// except by a lock-free ForceComplete, which TryComplete would lose.
func (o *Op) checkable() bool {
	return o.word().Load()&(stParked|stCompleted) == stParked
}

// TryComplete calls the operation's TryComplete under its lock if it is
// parked and not completed, and reports whether this call completed it
// (Kafka's safeTryComplete).
//
// If another goroutine holds the lock, it does not wait: it leaves a note
// that the holder acts on after unlocking (Kafka's maybeTryComplete). That
// is what keeps a callback that calls CheckAndComplete from deadlocking on a
// lock its own goroutine holds: Go's mutexes are not re-entrant, Kafka's
// are. The note is a bit of the state for the operation's own lock, and the
// SharedLock's list for a SharedLock.
func TryComplete(o *Op) bool {
	l := o.lock()
	tl, ok := l.(interface{ TryLock() bool })
	if !ok {
		l.Lock()
		defer l.Unlock()
		return o.checkable() && o.tryComplete()
	}
	shared := o.sharedLock()
	done := false
	for o.checkable() {
		if tl.TryLock() {
			o.clear(stTryAgain)
			done = o.checkable() && o.tryComplete()
			l.Unlock()
			// Someone may have left a note while we held the lock.
			if shared != nil || o.word().Load()&stTryAgain == 0 {
				break
			}
			continue
		}
		if shared != nil {
			// The holder checks the list after it unlocks. If it unlocked
			// before we added to the list, the TryLock below succeeds.
			shared.deferCheck(o)
			if !tl.TryLock() {
				break
			}
			l.Unlock() // drains the list, which includes o
			break
		}
		// The holder will see the note after it unlocks. If the note was
		// already there, the holder is bound to see it: no need to retry.
		if o.word().Or(stTryAgain)&stTryAgain != 0 {
			break
		}
		// We set the note, but the holder may have unlocked just before:
		// go round again.
	}
	return done
}

// LockForPark takes the operation's lock for TryCompleteElseWatch, which
// holds it across Park, the first TryComplete, watching every key and the
// last TryComplete (LastTryLocked). Release it with UnlockAfterPark.
//
// For an operation under a SharedLock that is held, it takes nothing and
// reports false: the holder may be this goroutine, running a callback of
// another operation that shares the lock, and waiting would never end.
// The caller hands the park to DeferPark instead.
func LockForPark(o *Op) (sync.Locker, bool) {
	var l sync.Locker = (*opLock)(o)
	if fh := o.fat(); fh != nil && fh.lock != nil {
		if s := fh.sharedLock(); s != nil {
			return s, s.TryLock()
		}
		l = fh.lock
	}
	l.Lock()
	return l, true
}

// DeferPark accepts a park of the operation, whose SharedLock is held,
// and has park run by whoever holds the lock when it unlocks it, just
// before it does, or at once, holding the lock, if it was unlocked
// meanwhile. park runs with the lock held and must not release it. So the
// park is finished inside the critical section that asked for it, as under
// Kafka's re-entrant lock: no other goroutine can take the lock and find
// the operation half parked. Call it only for an operation whose
// LockForPark reported false.
//
// It refuses, accepting nothing, an operation that cannot be parked (it
// is parked, completed or cancelled, or another park of it is deferred
// already: Already), and one for which there is no place (Reserve: Full).
// Otherwise the park is accepted at once, as Park would accept it (both
// use accept): the meta and its Tracker are published and the Observer is told of the park
// (now and watches as for Park), then the state records the deferral
// (stDeferred). A ForceComplete from then until the park runs
// completes the operation as an early completion of an accepted park: it
// counts it, gives back its place (Reserve) and tells the Observer, before
// OnComplete; the park then finds the deferral gone and does nothing. The
// deferred park must pass deferred to Park.
//
// The look at the state, the Observer's Parked and the swap happen under
// the lock's pmu, as do those of a Park of an operation under a
// SharedLock (its holder's, which made this one defer): whichever comes
// second sees the other's work and refuses the operation without telling
// the Observer.
func DeferPark(o *Op, t *Tracker, now int64, watches int, park func()) Refusal {
	sl := o.sharedLock()
	sl.pmu.Lock()
	if r, x := o.accept(t, now, watches, stDeferred); r != Accepted {
		sl.pmu.Unlock()
		o.abandon(t, x, now)
		return r
	}
	sl.parks = append(sl.parks, park)
	sl.pmu.Unlock()
	// If the lock was unlocked before park was listed, nobody may come:
	// take it and unlock it here.
	if sl.mu.TryLock() {
		sl.Unlock()
	}
	return Accepted
}

// UnlockAfterPark releases the lock taken by LockForPark and makes any
// check that was skipped meanwhile.
func UnlockAfterPark(o *Op, l sync.Locker) { o.unlockAndRecheck(l) }

// TryCompleteLocked calls TryComplete; the caller holds the lock and has
// parked the operation.
func TryCompleteLocked(o *Op) bool { return o.checkable() && o.tryComplete() }

// LastTryLocked is TryCompleteElseWatch's last TryComplete, once the
// operation is watched on every key. It is made only when it can find
// something the first did not: when a check may have looked for the
// operation on a key before it was watched there (missed), or found it
// and left a note because the caller holds its lock. The note is cleared,
// since this is the try it asks for. An operation under a SharedLock,
// whose notes are kept on the lock, is always tried.
func LastTryLocked(o *Op, missed bool) bool {
	if !missed && !o.clear(stTryAgain) {
		if o.sharedLock() == nil {
			return false
		}
	}
	return TryCompleteLocked(o)
}

// unlockAndRecheck unlocks and, if a check was skipped because we held the
// lock, makes it.
func (o *Op) unlockAndRecheck(l sync.Locker) {
	l.Unlock()
	if o.word().Load()&(stTryAgain|stCompleted) == stTryAgain {
		TryComplete(o)
	}
}

func (o *Op) tryComplete() (done bool) {
	t := o.tracker() // checkable: parked, so Park's write is seen
	if t != nil {
		defer func() {
			if r := recover(); r != nil {
				t.recovered(o, "TryComplete", r)
				done = false
			}
		}()
	}
	return o.tryCompleteIn(t, o.entry().Owner.(checked))
}

// tryCompleteIn is tryComplete without the recover: the caller holds the
// lock, the operation is checkable, t is its Tracker (nil only for an
// operation never parked), and c its callbacks. A panic in the user's TryComplete propagates;
// TryEach recovers it once for a whole run of operations.
func (o *Op) tryCompleteIn(t *Tracker, c checked) bool {
	if t != nil && t.Obs != nil {
		o.meta().tries.Add(1) // its own, with an Observer
	}
	return c.TryComplete() && o.tried(t)
}

// tried is what follows a TryComplete that reported true: it reports
// true, and completes the operation if TryComplete did not.
func (o *Op) tried(t *Tracker) bool {
	if o.word().Load()&stCompleted != 0 {
		return true
	}
	// TryComplete reported true without completing the operation (it
	// forgot to return ForceComplete()). Left as it is, the operation
	// would hang: pending for ever, its timeout and checks finding it
	// completed by this call. It meant that the operation can finish, so
	// finish it, as an early completion, and tell the purgatory once.
	if t != nil && t.misused.CompareAndSwap(false, true) && t.OnMisuse != nil {
		t.OnMisuse(Self(o))
	}
	o.complete(Early, false)
	return true
}

// sharedLock returns the operation's SharedLock, or nil.
func (o *Op) sharedLock() *SharedLock {
	if fh := o.fat(); fh != nil {
		return fh.sharedLock()
	}
	return nil
}

// TryEach tries the operations that hs hold, in order, as TryComplete
// tries each, and stops once n of them have completed; it returns how
// many it completed, and how many of hs it passed over because their
// operations had completed or been cancelled (tombstones). It is a check's loop (Kafka's
// tryCompleteWatched), and costs per operation about what Kafka's does:
// a look at the state, a lock, the user's TryComplete and an unlock.
//
// An operation with its own lock and nothing else of its own (not fat: no
// WithLock, SharedLock or context), the common case, is taken in one
// compare-and-swap that also checks it is parked and pending, and its
// TryComplete runs with no deferred recover of its own: tryRun recovers a
// panic once for the run, lets go of the lock the panicking operation
// held, counts the panic, and the loop resumes with the next operation.
// Any other operation goes through TryComplete.
func TryEach(hs []*Handle, n int) (done, gone int) {
	for i := 0; i < len(hs) && done < n; {
		var d, g int
		i, d, g = tryRun(hs, i, n-done)
		done += d
		gone += g
	}
	return done, gone
}

// checked is what a check needs of a user's operation, found with one
// type assertion: its callbacks, and the Op it embeds.
type checked interface {
	Callbacks
	Sealed
}

// tryRun is TryEach from hs[i], until n have completed or a TryComplete
// panics. It returns where TryEach goes on from, how many completed and
// how many it passed over.
func tryRun(hs []*Handle, i, n int) (next, done, gone int) {
	// at is the try under way, for the deferred function: the entry of
	// the operation whose user TryComplete is running (nil between them)
	// and its index; and the counts so far. (They are in memory whatever
	// they are kept in: a call spills every register.)
	var at struct {
		e             *core.OpEntry
		i, done, gone int
	}
	defer func() {
		if at.e == nil {
			return
		}
		// The user's TryComplete panicked, or called runtime.Goexit
		// (recover then returns nil and the goroutine goes on exiting).
		r := recover()
		o := at.e.Owner.(checked).mustEmbedOperationBase()
		if old := o.word().And(^(stLocked | stWaiters)); old&stWaiters != 0 {
			core.WakeBit(o.word())
		}
		if r == nil {
			return
		}
		o.tracker().recovered(o, "TryComplete", r)
		if o.word().Load()&(stTryAgain|stCompleted) == stTryAgain {
			TryComplete(o)
		}
		next, done, gone = at.i+1, at.done, at.gone
	}()
	// observed is whether the purgatory has an Observer, which counts an
	// operation's tries. Every operation a check tries is parked in the
	// one purgatory, so the first try asks its Tracker for all.
	observed, asked := false, false
	for ; i < len(hs) && at.done < n; i++ {
		e := hs[i].Entry()
		if e == nil {
			at.gone++ // a tombstone
			continue
		}
		c := e.Owner.(checked)
		w := &e.Aux
		s := w.Load()
		locked := (s | stLocked) &^ stTryAgain
		if s&(stParked|stCompleted|stFat|stLocked) != stParked || !w.CompareAndSwap(s, locked) {
			if s&(stParked|stCompleted) == stParked && TryComplete(c.mustEmbedOperationBase()) {
				at.done++
			}
			continue
		}
		// Locked, and seen parked and pending by the swap: checkable. (The
		// callbacks are called on c as it is: converting it to another
		// interface costs an itab lookup a try.)
		if !asked {
			observed, asked = c.mustEmbedOperationBase().tracker().Obs != nil, true
		}
		if observed {
			c.mustEmbedOperationBase().meta().tries.Add(1) // its own, with an Observer
		}
		at.e, at.i = e, i
		ok := c.TryComplete()
		at.e = nil
		if ok {
			at.done++
			if w.Load()&stCompleted == 0 {
				o := c.mustEmbedOperationBase()
				o.tried(o.tracker())
			}
		} else if w.CompareAndSwap(locked, locked&^stLocked) {
			continue // declined, and nobody waited or left a note meanwhile
		}
		old := w.And(^(stLocked | stWaiters))
		if old&stWaiters != 0 {
			core.WakeBit(w)
		}
		// A check that found the lock held left a note: it is ours to make.
		if old&(stTryAgain|stCompleted) == stTryAgain && TryComplete(c.mustEmbedOperationBase()) {
			at.done++
		}
	}
	return i, at.done, at.gone
}
