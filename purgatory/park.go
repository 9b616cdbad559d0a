package purgatory

import (
	"slices"
	"time"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/watchers"
)

// TryCompleteElseWatch tries to complete op now; if it cannot, it watches op
// on every key and starts its timeout. It returns true if op completed
// during the call by its own TryComplete. Once parked, op completes through
// CheckAndComplete on any of its keys, a ForceComplete, its timeout (which
// ResetTimeout moves), its context (operation.WithContext), CompleteForKey
// on any of its keys or Shutdown, whichever comes first; or leaves through
// CancelForKey.
//
// The operation's lock is held from parking it, across the first
// TryComplete, watching every key, and a last TryComplete, so a
// CheckAndComplete that runs in between is never lost (see the package
// documentation). The last TryComplete is made only if such a check ran:
// an operation parked while no check looked at its keys' shards is tried
// once, not twice as in Kafka.
//
// An operation whose lock is an operation.SharedLock that is held (by a
// callback running under it, say, parking the next operation of a group)
// is refused now if it must be, and otherwise parked by whoever unlocks
// the lock next, before it releases it: the call returns false at once.
// Waiting for the lock could wait for the caller itself.
//
// It returns an error, and parks nothing, for no keys (ErrNoKeys), a nil or
// uninitialised operation, an operation already parked, completed or
// cancelled (ErrAlreadyWatched), more than 2,097,151 keys
// (ErrTooManyKeys), every place WithMaxPending allows held (ErrFull: see
// WithMaxPending for what holds one), or after Shutdown (ErrShutdown).
func (p *Purgatory[K, T]) TryCompleteElseWatch(op T, keys ...K) (bool, error) {
	if len(keys) == 0 {
		return false, ErrNoKeys
	}
	if p.isNil(op) {
		return false, ErrNilOperation
	}
	o := lifecycle.Of(op)
	if !lifecycle.Initialised(o) {
		return false, ErrNotInitialised
	}
	if p.closed.Load() {
		if p.obs != nil {
			p.obs.refused(o, len(keys), ErrShutdown)
		}
		return false, ErrShutdown
	}
	if len(keys) > lifecycle.MaxKeys {
		return false, ErrTooManyKeys
	}
	// Refused at once, with no lock waited for and no place taken: a
	// second park of an operation, or a park of one that has completed.
	if !lifecycle.Parkable(o) {
		return false, ErrAlreadyWatched
	}
	// The levels, for an operation watched at levels, are asked for before
	// anything is parked: a WatchLevel that panics leaves nothing behind.
	var levels []int64
	if p.leveled != levelsNever {
		levels = p.levels(op, keys)
	}
	l, ok := lifecycle.LockForPark(o)
	if !ok {
		return p.deferPark(o, keys, levels)
	}
	done, err := p.park(o, keys, levels, false)
	lifecycle.UnlockAfterPark(o, l)
	return done, err
}

// refusal returns the error for a park lifecycle refused, having counted
// and told a refusal for want of a place (WithMaxPending).
func (p *Purgatory[K, T]) refusal(o *lifecycle.Op, keys int, r lifecycle.Refusal) error {
	if r == lifecycle.Already {
		return ErrAlreadyWatched
	}
	p.full.Add(1)
	if p.obs != nil {
		p.obs.refused(o, keys, ErrFull)
	}
	return ErrFull
}

// deferPark hands the park of o, whose SharedLock is held, to whoever
// unlocks it next: perhaps this goroutine, in a callback of an operation
// that shares the lock, where waiting for the lock would never end. What
// can be refused is refused now (a second park of op, ErrFull); otherwise
// the park is accepted now, and the rest of it, from its first
// TryComplete on, runs at the unlock, under the lock.
func (p *Purgatory[K, T]) deferPark(o *lifecycle.Op, keys []K, levels []int64) (bool, error) {
	held := slices.Clone(keys) // the caller may reuse its slice once we return
	p.at(stepDeferred)
	var now int64
	if p.obs != nil {
		now = p.now()
	}
	r := lifecycle.DeferPark(o, &p.tracker, now, len(held), func() {
		// It fails only if a ForceComplete completed op after the
		// deferral was accepted, and that completion counted it.
		_, _ = p.park(o, held, levels, true)
	})
	if r != lifecycle.Accepted {
		return false, p.refusal(o, len(keys), r)
	}
	return false, nil
}

// park is TryCompleteElseWatch from the moment op's lock is held, until
// just before it is released; deferred says the park was accepted by
// DeferPark, which took its place (Reserve). Otherwise lifecycle.Park
// takes the place, once it has seen op parkable under the lock, so that a
// park refused with ErrAlreadyWatched never holds one.
//
// Everything happens under the lock: the park, the first TryComplete, the
// timeout's Add, the watches and the last TryComplete. The operation
// counts as pending (NumDelayed) only once all of it is done: a test that
// waits for NumDelayed and then advances a MockTimer finds the timeout in
// the timer, its deadline measured at the park. The timeout is added
// before the watches because on a timer of package timer its slot is the
// Handle they hold. An Add never runs the expiry itself (timer.Timer),
// and an expiry run by whoever advances the timer waits for the lock, so
// the Add is safe here.
func (p *Purgatory[K, T]) park(o *lifecycle.Op, keys []K, levels []int64, deferred bool) (done bool, err error) {
	var now int64
	if p.obs != nil && !deferred {
		now = p.now()
	}
	if r := lifecycle.Park(o, &p.tracker, now, len(keys), deferred); r != lifecycle.Accepted {
		return false, p.refusal(o, len(keys), r)
	}
	defer lifecycle.Arrived(o, &p.tracker, len(keys))
	lifecycle.ArmContext(o)
	// Where the checks of the keys stand before the first TryComplete:
	// the last TryComplete is needed only if a check ran meanwhile and
	// looked for op before it was watched (watchers.Marks).
	var marks watchers.Marks
	p.watchers.Mark(keys, &marks)
	p.at(stepParked)
	if lifecycle.TryCompleteLocked(o) {
		return true, nil
	}
	p.at(stepTried)
	h := p.addTimeout(o)
	missed := false
	// Park counted the entries. A completion since (a ForceComplete takes
	// no lock; a closed timer expires it) has uncounted them, and they
	// would be tombstones: push none.
	if h != nil && !lifecycle.IsCompleted(o) {
		missed = p.watchers.Watch(h, keys, levels, &marks)
	}
	p.at(stepWatched)
	if lifecycle.LastTryLocked(o, missed) {
		return true, nil
	}
	if p.closed.Load() && !p.leavePending {
		// Shutdown may have collected the pending operations before op was
		// watched: expire it now rather than leave it.
		lifecycle.ExpireLocked(o, lifecycle.Shutdown)
	}
	p.at(stepTimed)
	return false, nil
}

// addTimeout adds the timeout of o, which its park holds the lock of, and
// returns o's Handle for its watch lists (nil if o has left meanwhile).
// If the timer refused it (it is closed: Shutdown is under way), o is
// expired now rather than left without a timeout, unless
// WithLeavePendingOnShutdown asks for pending operations to be left.
func (p *Purgatory[K, T]) addTimeout(o *lifecycle.Op) *lifecycle.Handle {
	h, err := lifecycle.AddTimeout(o, p.tracker.Core, p.timer)
	if err != nil && !p.leavePending {
		lifecycle.ExpireLocked(o, lifecycle.Shutdown)
	}
	return h
}

// CancelForKey stops watching key and returns the pending operations that
// were watching it, each once: those watching key without a level in the
// order they were parked, then those watching it at a level (Leveled),
// lowest level first and, at one level, in the order parked. Each is taken
// out of the purgatory: its timeout is cancelled, it is released from all
// its keys, and no callback runs. The caller owns them: answer them (a
// ForceComplete still runs OnComplete) or drop them. They cannot be parked
// again.
//
// Kafka leaves such an operation watched on its other keys, with no
// timeout: if none of those keys is checked again, it hangs. Here it leaves
// the purgatory whole.
//
// CancelForKey waits for each operation's lock, so that a check running
// its TryComplete finishes first; an operation that check completes is
// not returned. Do not call it while holding an operation's lock (from a
// TryComplete, or an OnComplete under a lock shared with the operations on
// key).
func (p *Purgatory[K, T]) CancelForKey(key K) []T {
	ops := p.watchers.Remove(key)
	if len(ops) == 0 {
		return nil
	}
	p.at(stepCancelRemoved)
	out := make([]T, 0, len(ops))
	for _, o := range ops {
		if lifecycle.Cancel(o) {
			if op, ok := lifecycle.Self(o).(T); ok {
				out = append(out, op)
			}
		}
	}
	return out
}

// CompleteForKey completes every pending operation watching key, each
// once, and returns how many it completed. Each completes as if by
// ForceComplete, except that its Cause reports cause: OnComplete runs,
// OnExpiration does not, and it is counted in Stats.CompletedForKey. Use
// it to answer everything waiting on something that has gone (a group
// unloaded, a partition's leadership moved away) now, with an error,
// rather than at each operation's timeout. A nil cause is allowed: Cause
// then reports nil, as for an early completion.
//
// Like CancelForKey it stops watching key; operations parked on key after
// it has run are not completed. Like ForceComplete it takes no lock, so a
// callback running under a lock the operations share may call it; a
// check running an operation's TryComplete at the same moment may see
// its ForceComplete lose.
func (p *Purgatory[K, T]) CompleteForKey(key K, cause error) int {
	ops := p.watchers.Remove(key)
	if len(ops) == 0 {
		return 0
	}
	p.at(stepCancelRemoved)
	c := &cause
	n := 0
	for _, o := range ops {
		if lifecycle.CompleteWith(o, c) {
			n++
		}
	}
	return n
}

// Complete completes op, pending in this purgatory, with Cause reporting
// cause, and reports whether this call completed it: false if op had
// completed already (by any path), was cancelled, or was never parked
// here. OnComplete runs, OnExpiration does not, and op is counted in
// Stats.CompletedForKey, as for CompleteForKey. An operation whose park
// was deferred to the holder of its operation.SharedLock (the park
// reported it parked) is completed once that holder has let go of the
// lock, and so parked it.
//
// Unlike ForceComplete, Complete takes op's lock: if a TryComplete of op
// is under way on another goroutine, Complete waits for it to return. So
// a TryComplete that has claimed something for op (a message, a slot) and
// completes it with ForceComplete is never overtaken by Complete, and
// what it claimed is not stranded. Use it to end the operation of a
// client that has gone away. Do not call it while holding op's lock (from
// op's TryComplete, or a callback under a lock op shares).
func (p *Purgatory[K, T]) Complete(op T, cause error) bool {
	if p.isNil(op) {
		return false
	}
	o := lifecycle.Of(op)
	if !lifecycle.AcceptedIn(o, &p.tracker) {
		return false
	}
	return lifecycle.CompleteLocked(o, cause)
}

// ResetTimeout gives op, pending in this purgatory, the timeout timeout
// from now: its deadline moves, earlier or later, and Timeout reports the
// new one. It reports whether it moved the deadline: false, changing
// nothing, if op had completed (by any path), been cancelled, was never
// parked here, or the purgatory has been shut down, and also while op is
// still pending if its old deadline has come and the timer has fired its
// entry: the expiry under way then completes op (unless another completion
// comes first). So true means the old deadline will not expire op. A timeout
// of zero or less makes op due at once: it expires on the reaper (with a
// MockTimer, at the next Advance), never inside this call. Like a timer's
// Add it costs O(1), and it allocates nothing.
//
// It is how a session is kept alive: Kafka's group coordinator completes
// a member's heartbeat operation and parks a new one at every heartbeat;
// here the one operation stays parked, on its keys, and its deadline moves.
//
// ResetTimeout takes no lock of op's, so a callback running under a lock
// op shares may call it. With WithoutTimer nothing expires: only the
// timeout that Timeout reports changes.
func (p *Purgatory[K, T]) ResetTimeout(op T, timeout time.Duration) bool {
	if p.isNil(op) || p.closed.Load() {
		return false
	}
	o := lifecycle.Of(op)
	if !lifecycle.PendingIn(o, &p.tracker) {
		return false
	}
	if c := p.tracker.Core; c != nil {
		if !lifecycle.ResetIn(o, c, timeout) {
			return false
		}
		p.at(stepReset)
		return true
	}
	if !lifecycle.Reset(o, timeout) {
		return false
	}
	p.at(stepReset)
	if p.timer == nil {
		return true
	}
	// A closed timer refuses the Add: Shutdown expires op (or leaves it)
	// with every other pending operation, as it finds them on the watch
	// lists once the timer is closed.
	task := lifecycle.Task(o)
	if task == nil {
		// Completed since the reset, and let go of its Handle: the reset
		// stood, unless Shutdown completed it.
		return !p.closed.Load()
	}
	if p.timer.Add(task) != nil {
		return false
	}
	lifecycle.CancelTimerIfDone(o)
	return true
}
