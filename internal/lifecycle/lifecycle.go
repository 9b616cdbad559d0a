// Package lifecycle is the state machine of a delayed operation: created,
// parked, watched, timed, and then exactly one of completed (early, expired,
// context, shutdown, for a key) or cancelled. Package operation embeds an Op in its
// public Base; package purgatory drives the transitions. Users reach none of
// it: Op has no exported methods, so embedding it promotes nothing a user
// can call or shadow.
//
// # States and transitions
//
// The state is one 32-bit word (the Aux word of the operation's timer
// entry, core.Entry), changed only by compare-and-swap:
//
//	bit 0      completed (terminal)
//	bits 1-3   how it completed: early, expired, context, shutdown, for a key
//	bit 4      parked: its park is published
//	bit 5      a check found the lock held and left a note
//	bits 6-7   the operation's own lock (lock.go)
//	bit 8      fat: a meta of its own since Init, for a lock given to WithLock or a context
//	bit 9      cancelled (terminal unless completed by ForceComplete)
//	bit 10     a park is deferred to the holder of its SharedLock (DeferPark)
//	bits 11-31 live watch entries, counted in the Tracker's watched
//
// Every transition that counts is one compare-and-swap, and the counts move
// with it: the winner of completed learns from the word it replaced whether
// the operation was parked and on how many keys, and takes exactly that off
// the Tracker. Transitions that a check must not interleave with (park,
// expiry, context, shutdown, cancel) also hold the operation's lock, and a
// check (TryComplete) runs only while holding it and only on a parked
// operation. docs/purgatory.md has the table.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/internal/core"
	"github.com/purgatory-go/purgatory/timer"
)

// Callbacks are the methods a user's operation provides.
type Callbacks interface {
	TryComplete() bool
	OnComplete()
	OnExpiration()
}

// Sealed is implemented only by types that embed an Op: its one method is
// unexported, so no other type can provide it.
type Sealed interface{ mustEmbedOperationBase() *Op }

// Of returns the Op embedded in s.
func Of(s Sealed) *Op { return s.mustEmbedOperationBase() }

// Op is the lifecycle of one operation: the timer entry (whose Aux word
// holds the state, whose Owner holds the user's operation, and whose
// handle is what the watch lists hold) and its meta: the Tracker of the
// purgatory it is parked in, and what only some operations need. It must
// not be copied after Init. It is 64 bytes.
//
// Op embeds the entry's holder, whose promoted method is unexported, so
// that nothing of the entry leaks into its method set, or into that of a
// user's operation that embeds it through operation.Base. Op has no
// exported method: a timer of package timer expires it through the expiry
// target Park sets, its meta.
type Op struct {
	// link holds the entry and its expiry target, the operation's meta
	// (o.meta()). Park sets the target before its CAS, and only whoever
	// has seen the operation parked (or cancelled, which comes after)
	// reads it, except for a fat operation, whose meta Init sets.
	link
}

// link names the embedded holder so that the field is unexported.
type link = core.OpBase[meta, *meta]

// Handle is what watch lists hold instead of the operation: a word that
// the operation's completion clears, which releases it from every list at
// once without taking a list's lock. On a timer of package timer it is
// the slot of the operation's first timeout (core.Slot), so that a parked
// operation costs its timer and its lists one word besides the lists' own.
type Handle = core.Slot

// OpOf returns the operation h holds, or nil once it has completed or been
// cancelled.
func OpOf(h *Handle) *Op {
	e := h.Entry()
	if e == nil {
		return nil
	}
	return Of(e.Owner.(Sealed))
}

// Live reports whether the operation h holds has neither completed nor
// been cancelled: OpOf(h) != nil, without finding the operation.
func Live(h *Handle) bool { return h.Entry() != nil }

func (o *Op) mustEmbedOperationBase() *Op { return o }

func (o *Op) entry() *core.OpEntry { return core.EntryOfOp(&o.link) }

// meta returns the operation's meta: its own (ext) or its Tracker's. Read
// it only once o is seen parked or cancelled, or for a fat operation.
func (o *Op) meta() *meta { return core.TargetOf(&o.link) }

// tracker returns the Tracker of the purgatory o parked in. Read it only
// once o is seen parked or cancelled (or its deferred park accepted).
func (o *Op) tracker() *Tracker { return o.meta().t.Load() }

// ext returns the operation's own meta, or nil if it has none.
func (o *Op) ext() *meta {
	if m := o.meta(); m != nil && m.own {
		return m
	}
	return nil
}

// State bits; see the package documentation.
const (
	stCompleted uint32 = 1 << 0
	kindShift          = 1
	kindMask    uint32 = 7 << kindShift
	stParked    uint32 = 1 << 4
	stTryAgain  uint32 = 1 << 5
	stLocked    uint32 = 1 << 6
	stWaiters   uint32 = 1 << 7
	stFat       uint32 = 1 << 8
	stCancelled uint32 = 1 << 9
	stDeferred  uint32 = 1 << 10

	watchShift        = 11
	watchOne   uint32 = 1 << watchShift
	flagBits          = watchOne - 1

	// MaxKeys is the most keys one operation can be watched on: its live
	// watch entries are counted in 21 bits of the state.
	MaxKeys = 1<<(32-watchShift) - 1

	// unparkable are the bits that refuse a park.
	unparkable = stParked | stCompleted | stCancelled | stDeferred
)

// watches returns the live watch entries counted in the state s.
func watches(s uint32) uint32 { return s >> watchShift }

// Outcome says how an operation left its purgatory: the one enum that the
// lifecycle, the Tracker's counts, package purgatory's Stats and
// Observers, and the exporters share (purgatory.Outcome is this type).
type Outcome uint8

// The outcomes. The first Completions complete the operation; Cancelled
// is CancelForKey's (Cancel), which completes nothing.
const (
	Early     Outcome = iota // TryComplete or ForceComplete
	Expired                  // its timeout
	Context                  // its context ended
	Shutdown                 // the purgatory shut down
	ForKey                   // CompleteWith, for a key, with a cause
	Cancelled                // taken out by Cancel

	// Completions is the number of Outcomes that complete an operation.
	Completions = 5
	// Outcomes is the number of Outcomes.
	Outcomes = 6
)

// String returns the outcome's short name: "early", "expired",
// "context", "shutdown", "for_key" or "cancelled", the label values the
// exporters use.
func (k Outcome) String() string {
	if k < Outcomes {
		return [...]string{"early", "expired", "context", "shutdown", "for_key", "cancelled"}[k]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(k))
}

// ErrShutdown is the one shutdown error: purgatory.ErrShutdown, which a
// purgatory returns for work offered after Shutdown, and the Cause of an
// operation Shutdown expired. It lives here because package operation
// reports it and cannot import package purgatory.
var ErrShutdown = errors.New("purgatory: shut down")

func (o *Op) word() *atomic.Uint32 { return &o.entry().Aux }

func (o *Op) self() Callbacks { return o.entry().Owner.(Callbacks) }

// Self returns the user's operation, or nil before Init.
func Self(o *Op) any { return o.entry().Owner }

// Task returns the Handle of a parked operation as a timer.Task, to Add to
// a timer of the user's own, whose Run expires the operation. The user's
// type is not consulted: a method of its own named Run has no effect. A
// timer that holds the task holds the Handle, which the operation's
// completion clears: the operation is unreachable from the timer at once.
// It returns nil if the operation has no Handle: before its park, and
// once it has left.
func Task(o *Op) timer.Task {
	if h := o.entry().Handle(); h != nil {
		return h
	}
	return nil
}

// meta is an operation's expiry target, and what only some operations
// need. An operation with nothing of its own shares its Tracker's (thin);
// one with a lock or a context given to Init (fat), one parked in a
// purgatory with an Observer, and one given a cause by CompleteWith has
// one of its own (own), which carries it.
type meta struct {
	// t is the Tracker of the purgatory the operation is parked in: set
	// before the meta is published (the Tracker's own, once, by its first
	// park).
	t   atomic.Pointer[Tracker]
	own bool
	// shared marks a meta of the Tracker's cause cache: own, for its
	// cause, but shared by every operation with nothing else of its own
	// completed with that cause. Nothing but the cause is written to it.
	shared bool
	// parked is the clock reading of the park, for an Observer. obs is
	// written by the park before it is published and read by the one
	// departure (complete or Cancel), which clears it so that the
	// observer's state does not outlive the stay.
	parked int64
	obs    any
	tries  atomic.Uint32 // TryComplete calls, counted only with an Observer
	lock   sync.Locker   // a *SharedLock, for a SharedLock (sharedLock)
	ctx    context.Context
	stop   atomic.Pointer[func() bool] // the context's AfterFunc, once armed
	cause  atomic.Pointer[error]       // CompleteWith's, the first one given
}

// ExpireEntry expires the operation whose timer entry e is, if it is
// still pending: at the deadline of the entry's that fired (fired, from a
// timer of package timer), or at whatever deadline a Timer of the user's
// own ran it for.
func (m *meta) ExpireEntry(e *core.OpEntry, fired bool) {
	s, ok := e.Owner.(Sealed)
	if !ok {
		return
	}
	if o := Of(s); o.entry() == e {
		if fired {
			expire(o)
		} else {
			finish(o, Expired)
		}
	}
}

// sharedLock returns the lock given to WithLock if it is a SharedLock. It
// is not kept in a field of its own: a pointer more would move a meta from
// the 96-byte size class to the 112-byte one.
func (m *meta) sharedLock() *SharedLock {
	s, _ := m.lock.(*SharedLock)
	return s
}

// MaxTimeout is the longest timeout an Op keeps: 2^61 ns, 73 years. Init
// takes longer ones as this, so that a deadline measured from any clock
// reading in the first 73 years is exact (timer deadlines saturate at math.MaxInt64).
const MaxTimeout = time.Duration(1 << 61)

// fat returns the meta Init gave an operation with a lock or a context,
// or nil.
func (o *Op) fat() *meta {
	if o.word().Load()&stFat == 0 {
		return nil
	}
	return o.meta()
}

// Options are what Init takes besides the timeout.
type Options struct {
	Lock sync.Locker
	Ctx  context.Context
}

// Init binds o to self, the user's operation that embeds it, and sets the
// timeout. It panics on misuse that would otherwise corrupt the state: a
// second Init of a parked operation.
func Init(o *Op, self Callbacks, timeout time.Duration, opt Options) {
	s := o.word().Load() // no one else writes it before the park
	if s&unparkable != 0 {
		panic("operation: Init of an operation already parked, completed or cancelled")
	}
	e := o.entry()
	e.Owner = self
	e.Delay = int64(min(timeout, MaxTimeout)) // not shared yet: a plain store
	if opt.Ctx != nil && (opt.Ctx == context.Background() || opt.Ctx == context.TODO()) {
		// Never ends and carries nothing an Observer could use. Other
		// contexts that never end are kept, unarmed: they may carry the
		// span an Observer parents its own on.
		opt.Ctx = nil
	}
	if opt.Lock != nil || opt.Ctx != nil {
		core.SetTarget(&o.link, &meta{own: true, lock: opt.Lock, ctx: opt.Ctx})
		o.word().Or(stFat)
	} else if s&stFat != 0 {
		// Only a second Init can find the bit set. A fresh operation's
		// word is zero: a locked instruction here would wait for the
		// allocation's stores to drain, and cost 5% of the CPU per
		// request of examples/purgatory_perf -timeout 1000 -pct50 50.
		o.word().And(^stFat)
		core.SetTarget(&o.link, nil)
	}
}

// Initialised reports whether Init has been called.
func Initialised(o *Op) bool { return o.entry().Owner != nil }

// Timeout returns the timeout given to Init.
func Timeout(o *Op) time.Duration { return o.entry().LoadDelay() }

// IsCompleted reports whether the operation has completed, by any path.
func IsCompleted(o *Op) bool { return o.word().Load()&stCompleted != 0 }

// IsCancelled reports whether CancelForKey took the operation out of its
// purgatory.
func IsCancelled(o *Op) bool { return o.word().Load()&stCancelled != 0 }

// KindOf reports how the operation completed; ok is false until it has.
func KindOf(o *Op) (k Outcome, ok bool) {
	s := o.word().Load()
	return Outcome((s & kindMask) >> kindShift), s&stCompleted != 0
}

// ContextOf returns the context given to Init, or nil.
func ContextOf(o *Op) context.Context {
	if fh := o.fat(); fh != nil {
		return fh.ctx
	}
	return nil
}

// ContextCause returns context.Cause of the operation's context, for an
// operation that completed as Context.
func ContextCause(o *Op) error {
	if fh := o.fat(); fh != nil && fh.ctx != nil {
		return context.Cause(fh.ctx)
	}
	return context.Canceled
}

// KeyCause returns the cause given to CompleteWith, for an operation that
// completed as ForKey.
func KeyCause(o *Op) error {
	if x := o.ext(); x != nil {
		if c := x.cause.Load(); c != nil {
			return *c
		}
	}
	return nil
}

// CompleteWith completes a parked operation as ForKey, with cause as what
// KeyCause reports, and reports whether this call completed it. Like
// ForceComplete it takes no lock, so that it may be called from a callback
// running under a lock the operation shares.
//
// The call that stores its cause first is the only one that may complete
// the operation as ForKey: others report false at once, as they would
// after its completion. So when several calls race (CompleteForKey on two
// of its keys), the call that counts the operation is the one whose cause
// it reports. The storing call may still lose the completion itself to
// another kind (a ForceComplete, an expiry); its cause is then never
// reported.
func CompleteWith(o *Op, cause *error) bool {
	if o.word().Load()&(stParked|stCompleted) != stParked {
		return false
	}
	// Seen parked: the meta is published. An operation that shares its
	// Tracker's gets one of its own, for the cause.
	x := o.meta()
	if !x.own {
		own := &meta{own: true}
		own.t.Store(x.t.Load())
		if core.SwapTarget(&o.link, x, own) {
			x = own
		} else {
			x = o.meta()
		}
	}
	if !x.cause.CompareAndSwap(nil, cause) {
		return false
	}
	if hk := o.tracker().Hooks; hk != nil && hk.CauseStored != nil {
		hk.CauseStored(o)
	}
	return o.complete(ForKey, true)
}

// CompleteLocked completes a parked operation as ForKey, with cause as
// what KeyCause reports, as CompleteWith does, and reports whether this
// call completed it; but it takes the operation's lock first. So it waits
// for a TryComplete of the operation under way on another goroutine to
// return, as Kafka's forceComplete does since KAFKA-19312: a TryComplete
// that has claimed something for the operation and is about to complete
// it is never overtaken. Do not call it while holding the operation's
// lock (a SharedLock included): it would wait for ever.
//
// It allocates nothing for a cause it has seen before (causeFor): an
// operation with nothing of its own then shares a meta that carries the
// cause, and one with a meta of its own points it at the cached copy.
//
// An operation whose park is deferred to the holder of its SharedLock is
// parked by the time the lock is had: the holder finishes the park before
// it lets go.
func CompleteLocked(o *Op, cause error) bool {
	if s := o.word().Load(); s&stCompleted != 0 || s&(stParked|stDeferred) == 0 {
		return false
	}
	l := o.lock()
	l.Lock()
	done := o.completeLocked(cause)
	o.unlockAndRecheck(l)
	return done
}

func (o *Op) completeLocked(cause error) bool {
	if o.word().Load()&(stParked|stCompleted) != stParked {
		return false
	}
	// Seen parked: the meta is published.
	x := o.meta()
	p, shared := x.t.Load().causeFor(cause)
	if !x.own && shared != nil && core.SwapTarget(&o.link, x, shared) {
		// The first to give the operation a cause, as CompleteWith's
		// CompareAndSwap of its cause decides it.
		if hk := o.tracker().Hooks; hk != nil && hk.CauseStored != nil {
			hk.CauseStored(o)
		}
		return o.complete(ForKey, true)
	}
	return CompleteWith(o, p)
}

// ForceComplete completes the operation early if nothing has completed it
// yet, and reports whether this call did. It takes no lock: user code may
// call it from anywhere, and TryComplete calls it under the lock. It
// panics if Init was not called: there is no OnComplete to run.
func ForceComplete(o *Op) bool {
	if o.entry().Owner == nil {
		panic("operation: ForceComplete of an operation whose Base.Init was not called")
	}
	return o.complete(Early, false)
}

// complete is the one transition into completed. With needParked it
// completes only a parked operation (expiry, context and shutdown act for a
// purgatory, and must not touch an operation it no longer holds). The
// compare-and-swap sets completed and the kind, clears parked and the watch
// count, and so decides in one step who won and what to uncount.
func (o *Op) complete(k Outcome, needParked bool) bool {
	w := o.word()
	for {
		s := w.Load()
		if s&stCompleted != 0 || needParked && s&stParked == 0 {
			return false
		}
		if o.completeFrom(s, k) {
			return true
		}
	}
}

// completeFrom completes the operation as k if its state is still s, one
// compare-and-swap (swapCompleted), and then does what the winner does
// (completed). It reports false, doing nothing, if the state has changed.
func (o *Op) completeFrom(s uint32, k Outcome) bool {
	end, ok := o.swapCompleted(s, k)
	if ok {
		o.completed(s, k, end)
	}
	return ok
}

// swapCompleted swaps the state from s to completed as k, and reports
// whether it did, with the clock reading that ends the time in purgatory.
func (o *Op) swapCompleted(s uint32, k Outcome) (end int64, ok bool) {
	// The end of the time in purgatory is read before the swap: on an
	// operation parked on another core the swap waits for the line to
	// come over, and a clock read after it would wait too. A read for a
	// completion that then loses the swap is wasted, and rare. Once the
	// operation is seen parked, its Tracker is safe to read.
	if s&(stParked|stDeferred) != 0 {
		if obs := o.tracker().Obs; obs != nil {
			end = obs.Now()
		}
	}
	ok = o.word().CompareAndSwap(s, (s|stCompleted|uint32(k)<<kindShift)&^(stParked|stDeferred)&flagBits)
	return end, ok
}

// completed is what the winner of the swap from s does: uncount, release,
// tell the Observer, call OnComplete (and OnExpiration for an expiry).
func (o *Op) completed(s uint32, k Outcome, end int64) {
	// Only an operation that was parked (or cancelled, after a park), or
	// whose deferred park was accepted, has a Tracker this goroutine may
	// read: the CAS it observed comes after Park's or DeferPark's write.
	// Callbacks of one never parked run unrecovered.
	var t *Tracker
	if s&(stParked|stCancelled|stDeferred) != 0 {
		t = o.tracker()
	}
	switch {
	case s&stParked != 0:
		st := t.stripe(o)
		st.left.Add(counts(watches(s)))
		st.done[k].Add(1)
		t.release()
	case s&stDeferred != 0:
		// A ForceComplete of an operation whose deferred park was
		// accepted (the call that accepted it reported it parked) and has
		// not run: an early completion, never counted as pending.
		t.stripe(o).done[k].Add(1)
		t.release()
	}
	o.release()
	if s&(stParked|stDeferred) != 0 && t.Obs != nil {
		o.left(t, k, end)
	}
	o.call(t, Callbacks.OnComplete, "OnComplete")
	if k == Expired || k == Shutdown {
		o.call(t, Callbacks.OnExpiration, "OnExpiration")
	}
}

// release lets go of everything that could reach or wake the operation
// once it has left its purgatory: the timer entry, its slots (the Handle,
// which takes it off every watch list at once: KAFKA-19389, and the
// timer's), and the context's AfterFunc. What stays with a completed
// operation is its meta: its Tracker's, or its own with what it reports
// (a cause, a context).
func (o *Op) release() {
	o.leaveTimer()
	if x := o.ext(); x != nil {
		if stop := x.stop.Swap(nil); stop != nil {
			(*stop)()
		}
	}
}

// left tells t's Observer that o, which was parked, left as k at end. Only
// the one departure calls it, so the meta's obs needs no lock.
func (o *Op) left(t *Tracker, k Outcome, end int64) {
	x := o.meta() // its own, whenever t has an Observer
	state := x.obs
	x.obs = nil
	t.Obs.Left(o, k, state, x.parked, end, x.tries.Load())
}

// call runs a user callback. Once the operation has been parked (t is set)
// a panic is recovered and reported, so that one bad callback cannot take
// down the goroutine that was completing many operations; before that it
// propagates to the caller, as from any method call.
func (o *Op) call(t *Tracker, f func(Callbacks), name string) {
	if t == nil {
		f(o.self())
		return
	}
	defer func() {
		if r := recover(); r != nil {
			t.recovered(o, name, r)
		}
	}()
	f(o.self())
}

// finish completes a parked operation as k (expiry, context, shutdown)
// under its lock, so that TryComplete, OnComplete and OnExpiration of one
// operation never overlap (KAFKA-19312). It does nothing to an operation
// that has completed, been cancelled, or was never parked.
func finish(o *Op, k Outcome) bool {
	l := o.lock()
	l.Lock()
	done := o.complete(k, true)
	o.unlockAndRecheck(l)
	return done
}

// expire is finish for a run of the operation's timer entry by a package
// timer timer. The run is stale, and does nothing, if Reset has moved the
// deadline since the entry fired: the entry is then cancelled or pending
// again, no longer fired.
//
// The expiry decides holding the entry's add-lock, from its check of the
// entry to its completing swap, and Reset moves the deadline holding the
// same lock, once it has seen the operation pending. So either the Reset
// comes first, and the expiry finds the entry moved; or the swap does,
// and the Reset finds the operation completed and reports false: the old
// deadline expired it. A completion that takes no lock (ForceComplete,
// CompleteWith) races the swap as it races any completion. The lock is
// let go before the callbacks run: one of them may reset another
// operation, or this one.
func expire(o *Op) bool {
	l := o.lock()
	l.Lock()
	w, e := o.word(), o.entry()
	if s := w.Load(); s&(stParked|stCompleted) == stParked && e.IsFired() {
		if hk := o.tracker().Hooks; hk != nil && hk.Claimed != nil {
			hk.Claimed(o)
		}
	}
	e.HoldAdd()
	var s uint32
	var end int64
	done := false
	for !done {
		s = w.Load()
		if s&(stParked|stCompleted) != stParked || !e.IsFired() {
			break
		}
		if hk := o.tracker().Hooks; hk != nil && hk.Deciding != nil {
			hk.Deciding(o)
		}
		// A failed swap is a note left by a check, or a lock-free
		// completion that won: look again.
		end, done = o.swapCompleted(s, Expired)
	}
	e.UnlockAdd()
	if done {
		o.completed(s, Expired, end)
	}
	o.unlockAndRecheck(l)
	return done
}

// Expire completes a parked operation as k: Expired, Context or Shutdown.
func Expire(o *Op, k Outcome) bool { return finish(o, k) }

// ExpireLocked is Expire for a caller that holds the operation's lock: a
// park that finds the purgatory shut down.
func ExpireLocked(o *Op, k Outcome) bool { return o.complete(k, true) }

// Park makes the operation pending in the purgatory that counts in t; now
// is a reading of
// t.Obs's clock, from which the time in purgatory is measured (with t.Obs
// set); watches is how many watch entries the caller will push for it,
// recorded in the same swap as the park itself. If the operation completes
// before the entries are pushed, its completion uncounts them and the
// pushed entries are tombstones from the start. The caller holds the lock
// (Lock), so two Parks of one operation cannot interleave.
//
// With deferred, Park finishes a park that DeferPark accepted: the meta
// (its Tracker and the Observer's state) and its place (Reserve) are in place,
// and Park only swaps the deferral for the park; it fails if a
// ForceComplete completed the operation since (the completion counted
// it). Otherwise it refuses (Already) an operation that is parked,
// completed or cancelled, or has a park deferred; then takes its place
// (Reserve), or refuses (Full); and only then publishes the park.
//
// Park does not count the operation as pending: the caller does, with
// Arrived, once its timeout is in the timer, so that a test that waits for
// NumDelayed and then advances a MockTimer finds the timeout there. Until
// then a completion may be counted before the arrival it follows; Live
// tells such a transient negative from a count.
//
// The meta (and with it the Tracker) is published before the
// compare-and-swap that parks, so a ForceComplete racing with Park either
// completes an unparked operation (Park then fails) or sees it. The
// Handle comes with the timeout (AddTimeout).
func Park(o *Op, t *Tracker, now int64, watches int, deferred bool) Refusal {
	if deferred {
		w := o.word()
		for {
			s := w.Load()
			if s&stDeferred == 0 {
				return Already // completed: its completion counted it
			}
			if w.CompareAndSwap(s, s&^stDeferred|stParked|uint32(watches)<<watchShift) {
				return Accepted
			}
		}
	}
	if sl := o.sharedLock(); sl != nil {
		// A DeferPark of the operation, by a goroutine that found the
		// lock held by this one, would race the swap below: it looks at
		// the state, tells the Observer and swaps, all under pmu.
		sl.pmu.Lock()
		defer sl.pmu.Unlock()
	}
	r, x := o.accept(t, now, watches, stParked|uint32(watches)<<watchShift)
	if x != nil {
		o.abandon(t, x, now)
	}
	return r
}

// accept is the acceptance that Park and DeferPark share, under the
// lock's pmu for an operation with a SharedLock. It refuses an operation
// that cannot be parked (Already) and one for which there is no place
// (Full); otherwise it takes the place (Reserve), publishes the park
// (publish) and swaps bits into the state. Only a ForceComplete can beat
// the swap (the caller holds the operation's lock, or defers to its
// holder, and nothing else completes an operation that is not parked):
// then accept gives the handle and the place back and refuses, returning
// the meta whose Observer must hear that the operation left, which the
// caller passes to abandon once it has let go of what it must.
func (o *Op) accept(t *Tracker, now int64, watches int, bits uint32) (Refusal, *meta) {
	w := o.word()
	if w.Load()&unparkable != 0 {
		return Already, nil
	}
	if !t.Reserve() {
		return Full, nil
	}
	x := o.publish(t, now, watches)
	if hk := t.Hooks; hk != nil && hk.Published != nil {
		hk.Published(o)
	}
	for {
		s := w.Load()
		if s&unparkable != 0 {
			o.entry().Leave()
			t.release()
			return Already, x
		}
		if w.CompareAndSwap(s, s|bits) {
			return Accepted, nil
		}
	}
}

// Refusal is what Park and DeferPark answer.
type Refusal uint8

const (
	// Accepted: parked, or the deferred park accepted.
	Accepted Refusal = iota
	// Already: the operation is parked, completed or cancelled, or a park
	// of it is deferred (ErrAlreadyWatched).
	Already
	// Full: MaxPending operations are pending (ErrFull).
	Full
)

// publish gives the operation its meta, and with it its Tracker, and
// tells the Observer of the park, before the swap that parks it or
// accepts its deferred park: once that swap is seen, the operation may
// complete on any goroutine, and its Left must find what Parked returned.
// An operation parked in a purgatory whose timer keeps no slots (a Timer
// of the user's own, or none) gets a Handle of its own here. It returns
// the meta that keeps the Observer's state, with an Observer.
func (o *Op) publish(t *Tracker, now int64, watches int) *meta {
	// A fat operation has its meta from Init: no one reads it before the
	// swap publishes it.
	m := o.fat()
	switch {
	case m != nil:
		m.t.Store(t)
	case t.Obs != nil:
		m = &meta{own: true}
		m.t.Store(t)
		core.SetTarget(&o.link, m)
	default:
		core.SetTarget(&o.link, t.thinMeta())
	}
	if t.Core == nil {
		o.entry().SetHandle(new(Handle))
	}
	if t.Obs == nil {
		return nil
	}
	m.parked = now
	m.obs = t.Obs.Parked(o, m.ctx, watches)
	return m
}

// abandon tells the Observer, which was told of a park that a
// ForceComplete then beat to the swap, that the operation left early:
// the park is refused (ErrAlreadyWatched) and Stats does not count it, but
// the Observer's state is not lost.
func (o *Op) abandon(t *Tracker, x *meta, now int64) {
	if x == nil {
		return
	}
	state := x.obs
	x.obs = nil
	t.Obs.Left(o, Early, state, now, t.Obs.Now(), 0)
}

// Arrived counts the operation, parked with watches watch entries, as
// pending in t. Call it once after each successful Park, whether or not
// the operation is still pending.
func Arrived(o *Op, t *Tracker, watches int) {
	t.stripe(o).arrived.Add(counts(uint32(watches)))
}

// Parkable reports whether a park of the operation could be accepted now:
// it is not parked, completed or cancelled, and no park of it is deferred.
func Parkable(o *Op) bool { return o.word().Load()&unparkable == 0 }

// ArmContext starts watching the operation's context, if it has one: when
// the context ends, the operation completes as Context. Call it after Park.
// If the context has already ended, the completion runs at once on another
// goroutine (it waits for the operation's lock).
func ArmContext(o *Op) {
	fh := o.fat()
	if fh == nil || fh.ctx == nil || fh.ctx.Done() == nil {
		return
	}
	stop := context.AfterFunc(fh.ctx, func() { finish(o, Context) })
	if hk := o.tracker().Hooks; hk != nil && hk.Registered != nil {
		hk.Registered(o)
	}
	fh.stop.Store(&stop)
	// A completion that ran before the Store found nothing to stop.
	if o.done() {
		if s := fh.stop.Swap(nil); s != nil {
			(*s)()
		}
	}
}

// Cancel takes a parked operation out of its purgatory without completing
// it (Kafka's cancelForKey): no callback runs, its timeout is cancelled, and
// it is released from all its keys. It reports whether this call cancelled
// it; false if it completed first. A cancelled operation cannot be parked
// again, but ForceComplete still completes it (uncounted).
//
// Cancel holds the operation's lock, so that a check already running the
// operation's TryComplete finishes first: the operation is then either
// completed by it or cancelled, never both.
func Cancel(o *Op) bool {
	l := o.lock()
	l.Lock()
	w := o.word()
	var s uint32
	for {
		s = w.Load()
		if s&stParked == 0 || s&stCompleted != 0 {
			o.unlockAndRecheck(l)
			return false
		}
		if w.CompareAndSwap(s, (s|stCancelled)&^stParked&flagBits) {
			break
		}
	}
	t := o.tracker()
	st := t.stripe(o)
	st.left.Add(counts(watches(s)))
	st.cancelled.Add(1)
	t.release()
	o.release()
	l.Unlock()
	if t.Obs != nil {
		o.left(t, Cancelled, t.Obs.Now())
	}
	return true
}

// AddTimeout adds the timeout of a parked operation, whose park holds its
// lock, to the purgatory's timer: to c, its engine, if it is a timer of
// package timer, and otherwise to user (nil with WithoutTimer). It returns
// the operation's Handle, for its watch lists: on c, the slot of the
// timeout (or of a reset's, made meanwhile, whose deadline then stands:
// the timeout is not added again), otherwise the Handle the park gave it.
// An error is the timer's refusal (closed).
//
// A completion that came in between, whose release found no timeout to
// cancel, or a slot not yet published, is caught here, as Kafka
// re-checks after adding: the timeout and the Handle are let go of again.
func AddTimeout(o *Op, c *core.Timer, user timer.Timer) (*Handle, error) {
	e := o.entry()
	var h *Handle
	var err error
	switch {
	case c != nil:
		if h, err = c.AddOp(e); err != nil && e.Handle() == nil {
			// Closed: the operation is expired now, or left pending
			// (WithLeavePendingOnShutdown), watched on a Handle of its
			// own.
			e.SetHandle(new(Handle))
			h = e.Handle()
		}
	case user != nil && !e.Touched(): // a reset since the park has added it
		h = e.Handle()
		if h != nil {
			err = user.Add(h)
		}
	default:
		h = e.Handle()
	}
	if o.done() {
		o.leaveTimer() // as CancelTimerIfDone: the completion may have come first
		return nil, err
	}
	return h, err
}

// CancelTimerIfDone lets go of the operation's timeout and slots if it
// completed while its timeout was being added (Kafka re-checks the same
// way after adding): the completion's release may have run before the
// Add.
func CancelTimerIfDone(o *Op) {
	if o.done() {
		o.leaveTimer()
	}
}

// done reports whether the operation has completed or been cancelled.
func (o *Op) done() bool { return o.word().Load()&(stCompleted|stCancelled) != 0 }

// leaveTimer cancels the operation's timeout and takes it out of its
// timer's slots, its handle included.
func (o *Op) leaveTimer() {
	e := o.entry()
	e.Cancel()
	e.Leave()
}

// PendingIn reports whether the operation is parked in the purgatory that
// counts in t, and has not completed.
func PendingIn(o *Op, t *Tracker) bool {
	// Seen parked: the tracker is published.
	return o.word().Load()&(stParked|stCompleted) == stParked && o.tracker() == t
}

// AcceptedIn reports whether a park of the operation in the purgatory
// that counts in t was accepted and the operation has not completed: it
// is parked, or its park is deferred to the holder of its SharedLock
// (DeferPark), who finishes it before letting go of the lock.
func AcceptedIn(o *Op, t *Tracker) bool {
	// Seen parked or deferred: the tracker is published.
	s := o.word().Load()
	return s&stCompleted == 0 && s&(stParked|stDeferred) != 0 && o.tracker() == t
}

// Reset gives a parked operation the timeout d, measured by the timer's
// next Add of its entry (Task), which the caller makes if Reset reports
// true. It reports false, changing nothing, if the operation is not
// pending: it completed (by any path, its old deadline included) or was
// cancelled.
//
// It takes no lock of the operation's: a callback running under a lock
// the operation shares may call it. It holds the entry's add-lock while
// it looks at the state and reschedules the entry, as the expiry does
// while it decides (expire), so the two are one decision.
func Reset(o *Op, d time.Duration) bool {
	w := o.word()
	if w.Load()&(stParked|stCompleted) != stParked {
		return false
	}
	e := o.entry()
	e.HoldAdd()
	if w.Load()&(stParked|stCompleted) != stParked {
		e.UnlockAdd()
		return false
	}
	e.RescheduleHeld(min(d, MaxTimeout))
	e.UnlockAdd() // no longer pending: takes it out of its bucket
	return true
}

// ResetIn gives a parked operation the timeout d in one step of c, the
// engine of the timer of package timer that holds its timeout: the old
// deadline is taken out and the new one, measured from one reading of
// c's clock, filed, with no turn of c in between (core.Timer.Reschedule),
// so that a reset is one point in time. It reports false, changing
// nothing, if the operation is not pending, or if its old deadline has
// fired already: the expiry under way then decides, and completes it
// unless another completion comes first. ResetIn of an operation whose
// park has not yet added its timeout adds it; the park then stands aside
// (core.Timer.AddOp).
func ResetIn(o *Op, c *core.Timer, d time.Duration) bool {
	if o.word().Load()&(stParked|stCompleted) != stParked {
		return false
	}
	return c.Reschedule(o.entry(), min(d, MaxTimeout), (*resetGuard)(o))
}

// resetGuard is an Op seen as a core.Guard: it may be rescheduled while it
// is parked and has not completed. Converting an *Op to it allocates
// nothing.
type resetGuard Op

func (g *resetGuard) Reschedulable() bool {
	return (*Op)(g).word().Load()&(stParked|stCompleted) == stParked
}
