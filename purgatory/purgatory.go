package purgatory

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/watchers"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/timer"
)

// Purgatory holds delayed operations of type T, watched by keys of type K,
// until they complete or expire. It is Kafka's DelayedOperationPurgatory.
//
// A Purgatory is safe for concurrent use by multiple goroutines.
type Purgatory[K comparable, T operation.DelayedOperation] struct {
	name   string
	logger *slog.Logger
	// logIDs are the attributes every log line starts with: the
	// purgatory's name, and the broker id given to WithBrokerID.
	logIDs []any
	// ptrT says T is a pointer type, whose nil a park refuses.
	ptrT     bool
	watchers *watchers.Watchers[K]
	timer    timer.Timer // nil with WithoutTimer
	tracker  lifecycle.Tracker
	// obs tells the Observers given to WithObserver; nil without any.
	obs *observing[K, T]
	// now reads the timer's clock (timer.Timer's Now), or with
	// WithoutTimer timer.SystemClock: the clock the time in purgatory is
	// measured on. A park reads it only with an Observer.
	now func() int64
	// hooks are the points of TryCompleteElseWatch and CancelForKey
	// where a test runs a competitor; nil outside this package's tests.
	hooks *hooks
	// leveled is levelsNever, levelsAlways or levelsAsk: whether T's
	// operations implement Leveled[K].
	leveled int
	purged  atomic.Uint64
	full    atomic.Uint64

	purgeInterval int64
	// purgedAt is the number of completions (of any kind) and cancels at
	// the last purge. Kafka counts every watched operation in
	// estimatedTotalOperations and compares it with NumDelayed; completions
	// since the last purge are the same quantity, and counting them needs no
	// counter of its own on the request path. Guarded by purgeMu.
	purgedAt     uint64
	purgeMu      sync.Mutex
	purging      atomic.Bool // a purge round is under way, a slice at a time
	leavePending bool

	closed   atomic.Bool
	stopOnce sync.Once
	done     chan struct{} // closed by Shutdown to stop the reaper
	reaped   chan struct{} // closed when the reaper has returned
	stopped  chan struct{} // closed when the reaper and the timer have stopped
}

// Stats are a purgatory's counters: plain values, cheap to copy. Stats()
// reads each atomically; the set is not one snapshot, but once nothing is
// in flight the figures agree: every operation accepted by
// TryCompleteElseWatch is either Pending or counted once in
// CompletedEarly, Expired, ContextDone, Shutdown, CompletedForKey or
// Cancelled. How long operations stayed is an Observer's business
// (package purgatory/timing).
type Stats struct {
	Pending        int    // operations parked and not completed: NumDelayed
	Watched        int    // watch entries of pending operations: Watched
	CompletedEarly uint64 // completed by TryComplete or ForceComplete
	Expired        uint64 // completed by their timeout
	ContextDone    uint64 // completed because the context given to operation.WithContext ended
	Shutdown       uint64 // expired by Shutdown
	// CompletedForKey counts operations completed by CompleteForKey.
	CompletedForKey uint64
	Cancelled       uint64 // taken out by CancelForKey
	Purged          uint64 // dead watch entries removed by the backstop purge
	Full            uint64 // refused with ErrFull (WithMaxPending)
	Panics          uint64 // recovered panics in TryComplete, OnComplete, OnExpiration, observers and expiry
}

// New returns a purgatory named name. Unless told otherwise it creates a
// timer.SystemTimer (1ms tick, 256 buckets a level: see WithTimerOptions)
// and a reaper goroutine that advances it, waiting 200ms at most each
// time, completes expired operations, and purges completed ones from the
// watch lists. Expired operations' OnComplete and OnExpiration run on the
// reaper goroutine, one at a time, so keep them short. Shut it down with
// Shutdown.
func New[K comparable, T operation.DelayedOperation](name string, opts ...Option) (*Purgatory[K, T], error) {
	c := defaultConfig()
	for _, o := range opts {
		o.apply(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := &Purgatory[K, T]{
		name:          name,
		logger:        c.logger,
		watchers:      watchers.New[K](c.shards),
		purgeInterval: int64(c.purgeInterval),
		leavePending:  c.leavePending,
		done:          make(chan struct{}),
		reaped:        make(chan struct{}),
		stopped:       make(chan struct{}),
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	p.logIDs = []any{"purgatory", name}
	if c.brokerSet {
		p.logIDs = append(p.logIDs, "broker", c.brokerID)
	}
	p.ptrT = reflect.TypeFor[T]().Kind() == reflect.Pointer
	p.tracker.OnPanic = p.recovered
	p.leveled = leveledMode[K, T]()
	p.tracker.MaxPending = int64(c.maxPending)
	switch {
	case c.noTimer:
	case c.timerSet:
		p.timer = c.timer
	default:
		topts := append([]timer.Option{
			// Expired operations complete on the reaper's goroutine. Kafka
			// hands them to one executor thread; here that would be a second
			// goroutine that must win a processor for every expiry, and on a
			// busy machine each such wait adds to expiry lateness (p99 8.3 ->
			// 3.6 ms at 500k expiries/s on 2 cores). WithTimerOptions can
			// set executors back.
			timer.WithExecutors(0),
			// A finest level of 512 one-millisecond buckets holds every
			// timeout up to 512 ms where it will expire: a fetch's
			// 500 ms max wait, the timeouts that most often run out, is
			// never moved down from a coarser level first. With Kafka's
			// 20, a 200 ms timeout was flushed twice, and the reaper of
			// examples/purgatory_perf -timeout 200 -pct50 10000 -pct75 10000
			// used 10% more CPU. The cost is memory: 320 KiB a level.
			timer.WithWheelSize(ownWheelSize),
			timer.WithLogger(p.logger),
			timer.WithPanicHandler(func(task timer.Task, v any) {
				// The lifecycle recovers callback panics itself; this
				// catches the rest.
				p.tracker.AddPanic()
				p.logger.Error("purgatory: expiry panicked", p.logAttrs("panic", v)...)
			}),
		}, c.timerOpts...)
		st, err := timer.NewSystemTimer(name, topts...)
		if err != nil {
			return nil, err
		}
		p.timer = st
	}
	if p.timer != nil {
		p.now = func() int64 { return int64(p.timer.Now()) }
	} else {
		p.now = func() int64 { return int64(timer.SystemClock{}.Now()) }
	}
	if len(c.observers) > 0 {
		p.obs = &observing[K, T]{p: p, obs: slices.Clone(c.observers)}
		p.tracker.Obs = p.obs
	}
	if c.noReaper {
		close(p.reaped)
	} else {
		go p.reap()
	}
	return p, nil
}

func (p *Purgatory[K, T]) recovered(op any, callback string, v any) {
	p.logger.Error("purgatory: callback panicked", p.logAttrs(
		"callback", callback, "operation", fmt.Sprintf("%T", op), "panic", v)...)
}

// logAttrs returns the purgatory's identifying attributes followed by kv.
func (p *Purgatory[K, T]) logAttrs(kv ...any) []any {
	return append(slices.Clip(p.logIDs), kv...)
}

// isNil reports whether op is nil: a nil interface, or a nil pointer when
// T is a pointer type. A plain comparison: reflection decided ptrT once,
// in New.
func (p *Purgatory[K, T]) isNil(op T) bool {
	if any(op) == nil {
		return true
	}
	var zero T
	return p.ptrT && any(op) == any(zero)
}

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
// cancelled (ErrAlreadyWatched), more than operation.MaxKeys keys
// (ErrTooManyKeys), WithMaxPending operations already pending (ErrFull), or
// after Shutdown (ErrShutdown).
func (p *Purgatory[K, T]) TryCompleteElseWatch(op T, keys ...K) (bool, error) {
	if len(keys) == 0 {
		return false, ErrNoKeys
	}
	if p.isNil(op) {
		return false, ErrNilOperation
	}
	o := lifecycle.Of(op)
	if !lifecycle.Initialised(o) {
		return false, fmt.Errorf("%w (%w)", ErrNotInitialised, operation.ErrNotInitialised)
	}
	if p.closed.Load() {
		if p.obs != nil {
			p.obs.refused(o, len(keys), ErrShutdown)
		}
		return false, ErrShutdown
	}
	if len(keys) > operation.MaxKeys {
		return false, ErrTooManyKeys
	}
	// The levels, for an operation watched at levels, are asked for before
	// anything is parked: a WatchLevel that panics leaves nothing behind.
	var levels []int64
	if p.leveled != levelsNever {
		levels = p.levels(op, keys)
	}
	if !p.tracker.Reserve() {
		p.full.Add(1)
		if p.obs != nil {
			p.obs.refused(o, len(keys), ErrFull)
		}
		return false, ErrFull
	}
	l, ok := lifecycle.LockForPark(o)
	if !ok {
		return p.deferPark(op, o, keys, levels)
	}
	done, err := p.park(o, keys, levels, false)
	lifecycle.UnlockAfterPark(o, l)
	return done, err
}

// deferPark hands the park of op, whose SharedLock is held, to whoever
// unlocks it next: perhaps this goroutine, in a callback of an operation
// that shares the lock, where waiting for the lock would never end. What
// can be refused is refused now, a second park of op among it; the rest
// of the park, from its first TryComplete on, runs at the unlock, under
// the lock.
func (p *Purgatory[K, T]) deferPark(op T, o *lifecycle.Op, keys []K, levels []int64) (bool, error) {
	held := slices.Clone(keys) // the caller may reuse its slice once we return
	p.at(stepDeferred)
	deferred := lifecycle.DeferPark(o, func() {
		_, err := p.park(o, held, levels, true)
		switch {
		case err == nil:
		case lifecycle.IsCompleted(o) && !lifecycle.IsCancelled(o):
			// A ForceComplete from a goroutine that did not hold the lock
			// came first. The call that accepted op reported it parked:
			// count it as an early completion, as if it had been.
			p.tracker.CountUnparked(o, len(held))
		default:
			// Nothing else can refuse it: DeferPark refuses a second park
			// while this one is deferred, and only Init clears that.
			p.logger.Error("purgatory: deferred park refused", p.logAttrs(
				"operation", fmt.Sprintf("%T", op), "err", err)...)
		}
	})
	if !deferred {
		p.tracker.Unreserve()
		return false, ErrAlreadyWatched
	}
	return false, nil
}

// park is TryCompleteElseWatch from the moment op's lock is held, until
// just before it is released; deferred says the park was deferred by a
// held SharedLock (lifecycle.DeferPark). It has taken a place (Reserve)
// that park gives back if it parks nothing.
//
// Everything happens under the lock: the park, the first TryComplete, the
// watches, the last TryComplete and the timeout's Add. The Add is last,
// and the operation counts as pending (NumDelayed) only once it is done:
// a test that waits for NumDelayed and then advances a MockTimer finds
// the timeout in the timer, its deadline measured at the park. An Add
// never runs the expiry itself (timer.Timer), and an expiry run by
// whoever advances the timer waits for the lock, so the Add is safe here.
func (p *Purgatory[K, T]) park(o *lifecycle.Op, keys []K, levels []int64, deferred bool) (done bool, err error) {
	var now int64
	if p.obs != nil {
		now = p.now()
	}
	h, ok := lifecycle.Park(o, &p.tracker, now, len(keys), deferred)
	if !ok {
		p.tracker.Unreserve()
		return false, ErrAlreadyWatched
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
	missed := false
	// Park counted the entries. A ForceComplete since (it takes no lock)
	// has uncounted them, and they would be tombstones: push none.
	if !lifecycle.IsCompleted(o) {
		missed = p.watchers.Watch(h, keys, levels, &marks)
	}
	p.at(stepWatched)
	if lifecycle.LastTryLocked(o, missed) {
		return true, nil
	}
	p.addTimeout(o)
	p.at(stepTimed)
	return false, nil
}

// addTimeout adds the timeout of o, which its park holds the lock of. If
// the timer refused it (it is closed: Shutdown is under way), or Shutdown
// may have collected the pending operations before o was watched, o is
// expired now rather than left without a timeout, unless
// WithLeavePendingOnShutdown asks for pending operations to be left. If a
// completion ran before the Add, its cancel found nothing to take out, and
// the entry is taken out here (as Kafka re-checks after adding).
func (p *Purgatory[K, T]) addTimeout(o *lifecycle.Op) {
	if p.timer != nil && !lifecycle.IsCompleted(o) {
		if p.timer.Add(lifecycle.Task(o)) != nil {
			if !p.leavePending {
				lifecycle.ExpireLocked(o, lifecycle.Shutdown)
			}
			return
		}
		lifecycle.CancelTimerIfDone(o)
	}
	if p.closed.Load() && !p.leavePending {
		lifecycle.ExpireLocked(o, lifecycle.Shutdown)
	}
}

// ownWheelSize is the wheel size of the timer a purgatory makes for
// itself (timer.WithWheelSize); WithTimerOptions can set another.
const ownWheelSize = 256

// CheckAndComplete tries to complete every operation watching key and
// returns how many it completed. Call it when something happens that may
// let operations on key finish. Do not call it while holding a lock that a
// TryComplete takes.
func (p *Purgatory[K, T]) CheckAndComplete(key K) int {
	return p.watchers.Check(key)
}

// CheckAndCompleteUpTo tries to complete the operations watching key at a
// level up to level (see Leveled), lowest level first, and returns how
// many it completed. Operations watching key without a level are not
// tried: CheckAndComplete tries everything. It costs O(log n + k) for n
// operations on key of which k are due, where CheckAndComplete costs O(n):
// on a key that thousands of requests wait on, the difference between one
// TryComplete per completion and thousands.
//
// Call it when the quantity the levels measure rises to level. Levels on a
// key must only rise: an operation whose level was passed before it was
// parked is completed by TryCompleteElseWatch's own TryComplete, or waits
// for the next CheckAndCompleteUpTo.
func (p *Purgatory[K, T]) CheckAndCompleteUpTo(key K, level int64) int {
	return p.watchers.CheckUpTo(key, level)
}

// Watched returns the number of watch entries of pending operations,
// counting an operation once per key (Kafka's PurgatorySize). Kafka also
// counts entries of completed operations until a purge, so this is never
// larger than Kafka's figure. O(1).
func (p *Purgatory[K, T]) Watched() int {
	_, w := p.tracker.Live()
	return int(max(w, 0))
}

// NumDelayed returns the number of parked operations that have not
// completed (Kafka's NumDelayedOperations).
func (p *Purgatory[K, T]) NumDelayed() int {
	n, _ := p.tracker.Live()
	return int(max(n, 0))
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

// ResetTimeout gives op, pending in this purgatory, the timeout timeout
// from now: its deadline moves, earlier or later, and Timeout reports the
// new one. It reports whether op was pending: false, changing nothing, if
// it had completed (by any path, including its old deadline, which wins a
// race with the reset once its expiry has completed it), been cancelled,
// was never parked here, or the purgatory has been shut down. A timeout
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
	if !lifecycle.PendingIn(o, &p.tracker) || !lifecycle.Reset(o, timeout) {
		return false
	}
	p.at(stepReset)
	if p.timer == nil {
		return true
	}
	// A closed timer refuses the Add: Shutdown expires op (or leaves it)
	// with every other pending operation, as it finds them on the watch
	// lists once the timer is closed.
	if p.timer.Add(lifecycle.Task(o)) != nil {
		return false
	}
	lifecycle.CancelTimerIfDone(o)
	return true
}

// Stats returns the purgatory's counters.
func (p *Purgatory[K, T]) Stats() Stats {
	c := p.tracker.Counts()
	return Stats{
		Pending:         int(max(c.Pending, 0)),
		Watched:         int(max(c.Watched, 0)),
		CompletedEarly:  c.Done[lifecycle.Early],
		Expired:         c.Done[lifecycle.Expired],
		ContextDone:     c.Done[lifecycle.Context],
		Shutdown:        c.Done[lifecycle.Shutdown],
		CompletedForKey: c.Done[lifecycle.ForKey],
		Cancelled:       c.Cancelled,
		Purged:          p.purged.Load(),
		Full:            p.full.Load(),
		Panics:          c.Panics,
	}
}

// AdvanceClock advances the timer, waiting up to timeout for a due bucket,
// and purges completed operations from the watch lists once Kafka's
// estimate says enough have piled up: one slice of the purge, of about
// 16,000 entries, a call, so that a purge of a hot key does not hold up
// expiries. The reaper calls it in a loop; call it yourself only with
// WithoutReaper, and regularly: a purge takes as many calls as it has slices.
func (p *Purgatory[K, T]) AdvanceClock(timeout time.Duration) {
	if p.timer != nil {
		p.timer.AdvanceClock(timeout)
	}
	p.maybePurge()
}

// maybePurge is Kafka's purge trigger (more than purgeInterval operations
// left since the last purge) with one condition added: the lists must hold
// more dead entries than live ones. A purge visits every entry; Kafka's
// trigger alone would, at a million completions a second, scan every list
// each millisecond. With the extra condition each purge is paid for by at
// least as many completions as it visits entries. Dead entries are 8-byte
// tombstones (the operations themselves are released at completion), so
// letting up to as many as there are live entries wait costs little.
//
// A round of the purge is done in slices of purgeSlice entries, one each
// call, so that a hot key's list of hundreds of thousands of entries does
// not hold up the expiries the reaper runs, nor the Watches of that key.
func (p *Purgatory[K, T]) maybePurge() {
	p.purgeMu.Lock()
	defer p.purgeMu.Unlock()
	if !p.purging.Load() && !p.purgeDue() {
		return
	}
	n, more := p.watchers.PurgeSlice(purgeSlice)
	p.purging.Store(more)
	if n > 0 {
		p.purged.Add(uint64(n))
	}
}

// purgeSlice is how many watch entries a slice of the purge visits: about
// 0.1-0.5 ms of work. At one slice a millisecond that is 16 million entries
// a second, above the 6 million that a million completions a second on
// three keys leave to visit (each round visits the live entries too, and
// no more of them than dead ones).
const purgeSlice = 1 << 14

// purgePoll is how long the reaper waits for the timer while a purge round
// is under way, so that the round goes on when nothing expires.
const purgePoll = time.Millisecond

// reaperPoll is how long the reaper waits for the timer otherwise (Kafka's
// 200 ms).
const reaperPoll = 200 * time.Millisecond

// purgeDue reports whether a purge round should start, and if so notes
// the completions it covers. The caller holds purgeMu.
func (p *Purgatory[K, T]) purgeDue() bool {
	_, live := p.tracker.Live()
	live = max(live, 0)
	dead := int64(p.watchers.Watched()) - live
	if dead <= live {
		return false
	}
	c := p.tracker.Counts()
	left := c.Cancelled
	for _, n := range c.Done {
		left += n
	}
	if left-p.purgedAt <= uint64(p.purgeInterval) {
		return false
	}
	p.purgedAt = left
	return true
}

// reap is Kafka's ExpiredOperationReaper.
func (p *Purgatory[K, T]) reap() {
	defer close(p.reaped)
	for {
		select {
		case <-p.done:
			return
		default:
		}
		poll := reaperPoll
		if p.purging.Load() {
			poll = purgePoll
		}
		if p.timer != nil {
			p.timer.AdvanceClock(poll)
		} else {
			select {
			case <-p.done:
				return
			case <-time.After(poll):
			}
		}
		p.maybePurge()
	}
}

// Shutdown stops the reaper and the timer and, unless
// WithLeavePendingOnShutdown was given, expires every pending operation
// (OnComplete, then OnExpiration, with Cause operation.ErrShutdown) so that
// no parked request is left hanging. Afterwards TryCompleteElseWatch
// returns ErrShutdown. Shutdown is idempotent; if ctx ends before the
// reaper has stopped, it returns ctx.Err() and a later call may finish the
// job. Like CancelForKey it takes each pending operation's lock: do not
// call it from a callback.
func (p *Purgatory[K, T]) Shutdown(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.closed.Store(true)
		close(p.done)
		// Closing the timer wakes a reaper waiting in AdvanceClock, and
		// waits for expiries already handed to the executor. A callback that
		// never returns would hold it up, hence the goroutine and ctx.
		go func() {
			if p.timer != nil {
				_ = p.timer.Close()
			}
			<-p.reaped
			close(p.stopped)
		}()
	})
	select {
	case <-p.stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !p.leavePending {
		p.watchers.Each(func(o *lifecycle.Op) { lifecycle.Expire(o, lifecycle.Shutdown) })
	}
	return nil
}

const (
	levelsNever  = iota // T does not implement Leveled[K]
	levelsAlways        // T does
	levelsAsk           // T is an interface type: ask each operation
)

// leveledMode decides once, for a concrete T, whether its operations are
// watched at levels, so that parking does not ask each one.
func leveledMode[K comparable, T operation.DelayedOperation]() int {
	if reflect.TypeFor[T]().Kind() == reflect.Interface {
		return levelsAsk
	}
	var zero T
	if _, ok := any(zero).(Leveled[K]); ok {
		return levelsAlways
	}
	return levelsNever
}

// levels asks op for its level on each key, or returns nil if op is not
// Leveled.
func (p *Purgatory[K, T]) levels(op T, keys []K) []int64 {
	lo, ok := any(op).(Leveled[K])
	if !ok {
		return nil
	}
	levels := make([]int64, len(keys))
	for i, k := range keys {
		levels[i] = lo.WatchLevel(k)
	}
	return levels
}
