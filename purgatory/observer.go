package purgatory

import (
	"context"
	"time"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/operation"
)

// Observer is told when an operation is parked, when it leaves the
// purgatory, and when a park is refused. Install one with WithObserver.
// The modules contrib/timing (histograms of the time in purgatory),
// contrib/prometheus and contrib/otel are built on it.
//
// Every Parked is followed by exactly one Left, given what Parked
// returned: an observer keeps its per-operation state there (a span, a
// start time) instead of in a map. The purgatory stores it in a record
// of the operation's own, which it allocates only when an observer is
// installed. The departures told agree with Stats, with one exception:
// an operation that user code force-completes while TryCompleteElseWatch
// is parking it (which then returns ErrAlreadyWatched, and Stats does not
// count it) is told as parked and left early, so that its state is not
// lost; there, and there only, Left may come after the OnComplete that the
// ForceComplete ran.
//
// The callbacks run on the goroutine that parks, completes or refuses
// the operation: a request's, a CheckAndComplete caller's, the reaper's
// (expiry), a context's AfterFunc's, Shutdown's. They must not block, or
// they hold up every operation behind them (all expiries, for the
// reaper), and they must not call back into the purgatory or the
// operation: Parked runs under the operation's lock (or, for a park
// deferred by its held operation.SharedLock, when the park is accepted,
// under a lock of the SharedLock's own). A panic in one is recovered,
// logged and counted in Stats.Panics.
type Observer interface {
	// Parked is called once the operation has passed every check and is
	// about to be watched, before its first TryComplete; for a park
	// deferred by a held SharedLock, when TryCompleteElseWatch accepts it.
	// What it returns is handed to Left; nil is fine. It is never called
	// for a refused operation.
	Parked(p Park) any
	// Left is called when a parked operation leaves, however it leaves,
	// with state as Parked returned it. It runs before the operation's
	// OnComplete, and only after Stats counts the departure.
	Left(state any, d Departure)
	// Refused is called when TryCompleteElseWatch turns an operation away
	// because every place WithMaxPending allows is held (ErrFull) or because
	// the purgatory has shut down (ErrShutdown). Refusals that mean the
	// caller misused the API (no keys, an operation not initialised or
	// already parked, too many keys) are returned to it and not reported.
	Refused(p Park, err error)
}

// Park describes an operation being parked, or refused.
type Park struct {
	// Context is the context given to operation.WithContext, or
	// context.Background() if there was none: the request's, in a broker,
	// and the parent of a span an observer starts.
	Context context.Context
	// Operation is the operation. Observers must not call its methods
	// from Parked, which runs under its lock.
	Operation operation.DelayedOperation
	// Keys is how many keys it is watched on.
	Keys int
}

// Departure describes how a parked operation left its purgatory.
type Departure struct {
	// Outcome is how it left.
	Outcome Outcome
	// Cause is what the operation's Cause reports: nil for an early
	// completion and a cancel, operation.ErrExpired, ErrShutdown,
	// context.Cause of its context, or the cause given to CompleteForKey.
	Cause error
	// Time is how long it was parked: from its park to its completion (its
	// OnComplete has not run yet) or cancel. It is measured on the timer's
	// clock (Timer.Now: a MockTimer's, in tests), or on timer.SystemClock
	// with WithoutTimer.
	Time time.Duration
	// Tries is how many times its TryComplete was called while it was
	// parked, including the call that completed it.
	Tries int
}

// Outcome says how an operation left its purgatory. Each has a counter in
// Stats.
type Outcome uint8

// The outcomes of a parked operation.
const (
	OutcomeEarly     = Outcome(lifecycle.Early)     // TryComplete or ForceComplete: Stats.CompletedEarly
	OutcomeExpired   = Outcome(lifecycle.Expired)   // its timeout: Stats.Expired
	OutcomeContext   = Outcome(lifecycle.Context)   // its context ended: Stats.ContextDone
	OutcomeShutdown  = Outcome(lifecycle.Shutdown)  // Shutdown expired it: Stats.Shutdown
	OutcomeForKey    = Outcome(lifecycle.ForKey)    // CompleteForKey or Complete: Stats.CompletedForKey
	OutcomeCancelled = Outcome(lifecycle.Cancelled) // CancelForKey took it out: Stats.Cancelled

	// Outcomes is the number of outcomes, for arrays indexed by Outcome.
	Outcomes = lifecycle.Outcomes
)

// String returns the outcome's short name: "early", "expired",
// "context", "shutdown", "for_key" or "cancelled", the label values the
// exporters use; "Outcome(n)" for a value out of range.
func (k Outcome) String() string { return lifecycle.Outcome(k).String() }

// WithObserver installs o. Given more than once, every observer is told
// of every event, in the order given, each with its own state. Without
// one a purgatory reads no clock and allocates nothing for observing; with
// one, each park and departure reads the clock once, and each parked
// operation gets a 96-byte record of its own. A nil o
// makes New return ErrInvalidOption.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) { c.observers = append(c.observers, o) })
}

// observing is what the lifecycle's Tracker tells of parks and departures
// (lifecycle.Observer): it turns them into the user's Observers' calls,
// each under its own recover, so that one observer's panic costs no other
// its call or its state.
type observing[K comparable, T operation.DelayedOperation] struct {
	p   *Purgatory[K, T]
	obs []Observer // in the order given to WithObserver; at least one
}

func (a *observing[K, T]) Now() int64 { return a.p.now() }

func (a *observing[K, T]) Parked(o *lifecycle.Op, ctx context.Context, keys int) any {
	pk := park[T](o, ctx, keys)
	if len(a.obs) == 1 {
		return a.parked(a.obs[0], pk)
	}
	// Several: the states go in a slice, allocated only once an observer
	// returns one, so that observers that keep none cost nothing here.
	var states []any
	for i, ob := range a.obs {
		if s := a.parked(ob, pk); s != nil {
			if states == nil {
				states = make([]any, len(a.obs))
			}
			states[i] = s
		}
	}
	if states == nil {
		return nil
	}
	return states
}

func (a *observing[K, T]) parked(ob Observer, pk Park) any {
	defer a.recover("Parked")
	return ob.Parked(pk)
}

func (a *observing[K, T]) Left(o *lifecycle.Op, k lifecycle.Outcome, state any, parked, end int64, tries uint32) {
	d := Departure{Outcome: Outcome(k), Time: time.Duration(max(end-parked, 0)), Tries: int(tries)}
	switch k {
	case lifecycle.Expired:
		d.Cause = operation.ErrExpired
	case lifecycle.Shutdown:
		d.Cause = ErrShutdown
	case lifecycle.Context:
		d.Cause = lifecycle.ContextCause(o)
	case lifecycle.ForKey:
		d.Cause = lifecycle.KeyCause(o)
	}
	if len(a.obs) == 1 {
		a.left(a.obs[0], state, d)
		return
	}
	states, _ := state.([]any)
	for i, ob := range a.obs {
		var s any
		if states != nil {
			s = states[i]
		}
		a.left(ob, s, d)
	}
}

func (a *observing[K, T]) left(ob Observer, state any, d Departure) {
	defer a.recover("Left")
	ob.Left(state, d)
}

func (a *observing[K, T]) refused(o *lifecycle.Op, keys int, err error) {
	pk := park[T](o, lifecycle.ContextOf(o), keys)
	for _, ob := range a.obs {
		func() {
			defer a.recover("Refused")
			ob.Refused(pk, err)
		}()
	}
}

// recover is deferred by each call into an observer: a panic there is a
// bug in the observer, and must not take down the reaper or lose the
// operation's completion, which goes on after Left.
func (a *observing[K, T]) recover(callback string) {
	if v := recover(); v != nil {
		a.p.tracker.AddPanic()
		a.p.logger.Error("purgatory: observer panicked", a.p.logAttrs(
			"callback", callback, "panic", v)...)
	}
}

// park describes o for an observer. The operation is asserted to T, which
// for a concrete T is a comparison of types, not a search of method sets.
func park[T operation.DelayedOperation](o *lifecycle.Op, ctx context.Context, keys int) Park {
	if ctx == nil {
		ctx = context.Background()
	}
	pk := Park{Context: ctx, Keys: keys}
	if op, ok := lifecycle.Self(o).(T); ok {
		pk.Operation = op
	}
	return pk
}
