package purgatory

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/watchers"
	"github.com/purgatory-go/purgatory/timer"
)

// Errors returned by this package. Check them with [errors.Is].
var (
	// ErrNoKeys is returned by TryCompleteElseWatch when no key is given.
	ErrNoKeys = errors.New("purgatory: no keys")
	// ErrNilOperation is returned for a nil operation.
	ErrNilOperation = errors.New("purgatory: nil operation")
	// ErrNotInitialised is returned for an operation whose Base.Init was
	// not called.
	ErrNotInitialised = errors.New("purgatory: operation not initialised: call Base.Init")
	// ErrAlreadyWatched is returned for an operation that is already parked
	// in a purgatory, completed, or cancelled by CancelForKey, or whose
	// park is deferred: accepted while its operation.SharedLock was held,
	// and waiting for the unlock to finish it.
	ErrAlreadyWatched = errors.New("purgatory: operation already parked, completed or cancelled")
	// ErrTooManyKeys is returned for a park on more than 2,097,151 keys
	// (2^21-1: an operation counts its live watch entries in 21 bits).
	ErrTooManyKeys = errors.New("purgatory: too many keys")
	// ErrFull is returned by TryCompleteElseWatch when every place that
	// WithMaxPending allows is held: by pending operations, parks under
	// way, and operations leaving that have not yet given theirs back (see
	// WithMaxPending), so NumDelayed may be below the bound, even 0. The
	// operation is neither parked nor tried; answer it with a "busy" error
	// or retry later.
	ErrFull = errors.New("purgatory: too many pending operations")
	// ErrShutdown is returned once Shutdown has been called, and is the
	// Cause of an operation Shutdown expired: one error for one event.
	// Its text is "purgatory: shut down".
	ErrShutdown = lifecycle.ErrShutdown
	// ErrInvalidOption is returned by New for an option out of range.
	ErrInvalidOption = errors.New("purgatory: invalid option")
)

// defaultPurgeInterval is Kafka's default purge interval.
const defaultPurgeInterval = 1000

// Option configures a Purgatory.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	timer         timer.Timer
	timerSet      bool
	noTimer       bool
	noReaper      bool
	purgeInterval int
	brokerID      int
	brokerSet     bool
	logger        *slog.Logger
	shards        int
	leavePending  bool
	timerOpts     []timer.Option
	maxPending    int
	observers     []Observer
}

func (c *config) validate() error {
	bad := func(why string) error { return fmt.Errorf("%w: %s", ErrInvalidOption, why) }
	if c.purgeInterval < 0 {
		return bad("purge interval must not be negative")
	}
	if c.shards < 1 {
		return bad("shards must be at least 1")
	}
	if c.timerSet && c.noTimer {
		return bad("WithTimer and WithoutTimer together")
	}
	if c.timerSet && isNilValue(c.timer) {
		return bad("WithTimer given a nil timer")
	}
	if c.maxPending < 0 {
		return bad("max pending must not be negative")
	}
	for _, o := range c.observers {
		if isNilValue(o) {
			return bad("WithObserver given a nil observer")
		}
	}
	return nil
}

// isNilValue reports whether v is nil or holds a nil pointer. New refuses
// both, once, so that no goroutine of the purgatory calls a method on one
// later; the request path makes plain comparisons only.
func isNilValue(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// WithTimer makes the purgatory use t for timeouts instead of creating a
// SystemTimer. Shutdown closes it. A timer.MockTimer with WithoutReaper
// makes expiry deterministic in tests.
//
// The timer may also run the service's own timer.Tasks (a message's
// delay, a visibility timeout): add them to t. Unless WithoutReaper is
// given, the purgatory's reaper advances t, so they run on the reaper
// beside the operations' expiries, and must be short; once Shutdown has
// closed t, Add refuses tasks and pending ones do not run. On a MockTimer
// they run in the Advance that passes their deadline, with the
// operations' expiries. docs/purgatory.md, "Your own tasks on the
// purgatory's timer", shows the pattern.
//
// The options of WithTimerOptions, and the ones the purgatory gives the
// timer it makes (timer.WithExecutors(0), timer.WithWheelSize(256)), do
// not apply to a timer given here: pass them to timer.NewSystemTimer to
// have the same timer.
//
// The timer receives each operation's timeout as a timer.Task, added at
// the park while the operation's lock is held; whatever it wraps, the
// Task's Run expires the operation. Its Now is the clock an Observer's
// time in purgatory is measured on. A nil t makes New return
// ErrInvalidOption.
//
// A Timer of package timer (SystemTimer, MockTimer, a Reaper of either)
// lets ResetTimeout stop an expiry that the old deadline had already made
// due. A Timer of your own cannot tell the lifecycle which Add a Run is
// for: a Run it makes for a deadline a reset has since moved still
// expires the operation.
func WithTimer(t timer.Timer) Option {
	return optionFunc(func(c *config) { c.timer, c.timerSet = t, true })
}

// WithTimerOptions passes options to the SystemTimer the purgatory creates,
// after its own: expiries on the reaper (timer.WithExecutors(0)) and a
// wheel of 256 (timer.WithWheelSize), whose finest level holds timeouts up
// to 512 ms without moving them between levels, for 320 KiB a level.
func WithTimerOptions(opts ...timer.Option) Option {
	return optionFunc(func(c *config) { c.timerOpts = append(c.timerOpts, opts...) })
}

// WithoutTimer disables timeouts: operations complete only through
// TryComplete or ForceComplete (Kafka's timerEnabled = false).
func WithoutTimer() Option { return optionFunc(func(c *config) { c.noTimer = true }) }

// WithoutReaper starts no goroutine: the caller advances the timer and
// triggers purges by calling AdvanceClock.
func WithoutReaper() Option { return optionFunc(func(c *config) { c.noReaper = true }) }

// WithPurgeInterval sets how many completed operations may be estimated to
// linger on watch lists before the reaper sweeps them. The default is 1000.
// Completed operations unlink themselves at once, so the sweep is a
// backstop.
func WithPurgeInterval(n int) Option { return optionFunc(func(c *config) { c.purgeInterval = n }) }

// WithBrokerID records the broker id, added to log lines as broker=id.
// Without it log lines name no broker.
func WithBrokerID(id int) Option {
	return optionFunc(func(c *config) { c.brokerID, c.brokerSet = id, true })
}

// WithLogger sets the logger for recovered panics. The default is
// slog.Default.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithShards sets the number of watcher shards, at least 1 (New returns
// ErrInvalidOption otherwise). The default is 512.
func WithShards(n int) Option { return optionFunc(func(c *config) { c.shards = n }) }

// WithMaxPending bounds the operations pending at once to n: when n
// places are held, TryCompleteElseWatch returns ErrFull and parks nothing,
// so that a burst of requests that cannot be answered turns into errors
// the client can see instead of memory the server cannot spare. Refusals
// are counted in Stats.Full. Zero, the default, means no bound; without it
// no shared counter is touched on the request path.
//
// The bound counts places, not NumDelayed. A place is held by each
// pending operation; by each park under way, from the moment it has seen
// its operation parkable under the operation's lock (or a deferred park
// is accepted) until it is counted in NumDelayed; and by each operation
// leaving, from the swap that completes or cancels it until the call that
// made it leave gives the place back, a few instructions later (the
// expiry, a check, ForceComplete, CompleteForKey, CancelForKey, a
// context's end, Shutdown). So a park may be refused with ErrFull while
// NumDelayed reports fewer than n, even 0. Once nothing is in flight, and
// no park waits for the unlock of its SharedLock, the places held are
// exactly NumDelayed.
func WithMaxPending(n int) Option { return optionFunc(func(c *config) { c.maxPending = n }) }

// WithLeavePendingOnShutdown keeps Kafka's behaviour at shutdown: pending
// operations are left as they are, neither completed nor expired. The
// default expires them all, so no parked request hangs.
func WithLeavePendingOnShutdown() Option {
	return optionFunc(func(c *config) { c.leavePending = true })
}

func defaultConfig() config {
	return config{purgeInterval: defaultPurgeInterval, shards: watchers.DefaultShards}
}
