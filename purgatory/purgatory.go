package purgatory

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/purgatory-go/purgatory/internal/core"
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
	// ptrT says T is a pointer type, whose nil a park refuses; ifaceT
	// that T is an interface type, which may hold a nil pointer.
	ptrT, ifaceT bool
	watchers     *watchers.Watchers[K]
	timer        timer.Timer // nil with WithoutTimer
	// tracker.Core is timer's engine if timer is one of package timer's (a
	// SystemTimer, a MockTimer, a Reaper of either), or nil: a timeout is
	// then a slot (lifecycle.AddTimeout), and a reset one step
	// (lifecycle.ResetIn).
	tracker lifecycle.Tracker
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
// (module contrib/timing keeps histograms of it).
type Stats struct {
	Pending        int    // operations parked and not completed: NumDelayed
	Watched        int    // watch entries of pending operations: Watched
	CompletedEarly uint64 // completed by TryComplete or ForceComplete
	Expired        uint64 // completed by their timeout
	ContextDone    uint64 // completed because the context given to operation.WithContext ended
	Shutdown       uint64 // expired by Shutdown
	// CompletedForKey counts operations completed with a cause: by
	// CompleteForKey, or by Complete.
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
	p.ifaceT = reflect.TypeFor[T]().Kind() == reflect.Interface
	p.tracker.OnPanic = p.recovered
	p.tracker.OnMisuse = func(op any) {
		p.logger.Error("purgatory: TryComplete returned true without completing its operation; "+
			"the purgatory completed it (return ForceComplete() from TryComplete)",
			p.logAttrs("operation", fmt.Sprintf("%T", op))...)
	}
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
	p.tracker.Core = core.TimerOf(p.timer)
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

// isNil reports whether op is nil: a nil interface, or a nil pointer,
// whether T is a pointer type or an interface type holding one. For a
// pointer type it is a plain comparison (reflection decided ptrT once, in
// New); an interface type's value is looked at with reflect, which
// allocates nothing for a pointer.
func (p *Purgatory[K, T]) isNil(op T) bool {
	if any(op) == nil {
		return true
	}
	if p.ptrT {
		var zero T
		return any(op) == any(zero)
	}
	if p.ifaceT {
		v := reflect.ValueOf(any(op))
		return v.Kind() == reflect.Pointer && v.IsNil()
	}
	return false
}

// ownWheelSize is the wheel size of the timer a purgatory makes for
// itself (timer.WithWheelSize); WithTimerOptions can set another.
const ownWheelSize = 256

// CheckAndComplete tries to complete every operation watching key and
// returns how many it completed. Call it when something happens that may
// let operations on key finish. Do not call it while holding a lock that a
// TryComplete takes.
//
// It tries them in the order they were parked on key, oldest first; those
// watching at a level (Leveled) come after the others, lowest level first.
// Operations parked on key after the check began are not tried: their
// parks made a TryComplete of their own. It allocates nothing.
func (p *Purgatory[K, T]) CheckAndComplete(key K) int {
	return p.watchers.Check(key)
}

// CheckAndCompleteN tries the operations watching key in the order
// CheckAndComplete does, oldest first, and stops once n of them have
// completed; it returns how many completed. n < 1 completes nothing. Use
// it where one event can answer only one waiter (a message on a queue, a
// slot in a pool): CheckAndCompleteN(key, 1) completes the operation that
// has waited longest among those whose TryComplete accepts, and leaves
// the ones behind it untried.
//
// Its cost follows the operations it tries, not those watching: with
// 10,000 operations on key, a call whose first try completes costs what
// it costs with one. A new park's own first TryComplete may take what an
// event left ahead of older waiters whose check has not run yet, as a new
// arrival may take a sync.Mutex ahead of a woken waiter (docs/purgatory.md,
// "Many waiters on one key").
func (p *Purgatory[K, T]) CheckAndCompleteN(key K, n int) int {
	return p.watchers.CheckN(key, n)
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
