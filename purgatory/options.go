package purgatory

import (
	"errors"
	"log/slog"

	"github.com/purgatory-go/purgatory/internal/nilcheck"
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
	// not called. It wraps operation.ErrNotInitialised.
	ErrNotInitialised = errors.New("purgatory: operation not initialised")
	// ErrAlreadyWatched is returned for an operation that is already parked
	// in a purgatory, completed, or cancelled by CancelForKey.
	ErrAlreadyWatched = errors.New("purgatory: operation already parked, completed or cancelled")
	// ErrTooManyKeys is returned for more than operation.MaxKeys keys.
	ErrTooManyKeys = errors.New("purgatory: too many keys")
	// ErrFull is returned by TryCompleteElseWatch when the number of
	// pending operations has reached the bound set by WithMaxPending. The
	// operation is neither parked nor tried; answer it with a "busy" error
	// or retry later.
	ErrFull = errors.New("purgatory: too many pending operations")
	// ErrShutdown is returned once Shutdown has been called.
	ErrShutdown = errors.New("purgatory: shut down")
	// ErrInvalidOption is returned by New for an option out of range.
	ErrInvalidOption = errors.New("purgatory: invalid option")
)

// DefaultPurgeInterval is Kafka's default purge interval.
const DefaultPurgeInterval = 1000

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
	logger        *slog.Logger
	shards        int
	leavePending  bool
	timerOpts     []timer.Option
	maxPending    int
	observers     []Observer
}

func (c *config) validate() error {
	if c.purgeInterval < 0 {
		return errors.Join(ErrInvalidOption, errors.New("purge interval must not be negative"))
	}
	if c.shards < 0 {
		return errors.Join(ErrInvalidOption, errors.New("shards must not be negative"))
	}
	if c.timerSet && c.noTimer {
		return errors.Join(ErrInvalidOption, errors.New("WithTimer and WithoutTimer together"))
	}
	if c.timerSet && nilcheck.IsNil(c.timer) {
		return errors.Join(ErrInvalidOption, errors.New("WithTimer given a nil timer"))
	}
	if c.maxPending < 0 {
		return errors.Join(ErrInvalidOption, errors.New("max pending must not be negative"))
	}
	for _, o := range c.observers {
		if nilcheck.IsNil(o) {
			return errors.Join(ErrInvalidOption, errors.New("WithObserver given a nil observer"))
		}
	}
	return nil
}

// WithTimer makes the purgatory use t for timeouts instead of creating a
// SystemTimer. Shutdown closes it. A timer.MockTimer with WithoutReaper
// makes expiry deterministic in tests.
//
// The timer receives each operation's timeout as a timer.Task; whatever
// it wraps, the Task's Run expires the operation. If t reports its clock
// with a method Now() time.Duration (timer.SystemTimer and
// timer.MockTimer do), timeouts of 800 ms or more are added 0-400 ms of
// that clock after the park, with the deadline fixed at park, and the
// time in purgatory an Observer is told is measured on it; otherwise every timeout is added at
// park (docs/purgatory.md, "Long timeouts wait before they enter the
// timer"). A nil t (or a typed nil)
// makes New return ErrInvalidOption.
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

// WithBrokerID records the broker id, added to log lines.
func WithBrokerID(id int) Option { return optionFunc(func(c *config) { c.brokerID = id }) }

// WithLogger sets the logger for recovered panics. The default is
// slog.Default.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithShards sets the number of watcher shards. The default is 512.
func WithShards(n int) Option { return optionFunc(func(c *config) { c.shards = n }) }

// WithMaxPending bounds the operations pending at once to n: when n are
// pending, TryCompleteElseWatch returns ErrFull and parks nothing, so that
// a burst of requests that cannot be answered turns into errors the client
// can see instead of memory the server cannot spare. Refusals are counted
// in Stats.Full. Zero, the default, means no bound; without it no shared
// counter is touched on the request path.
func WithMaxPending(n int) Option { return optionFunc(func(c *config) { c.maxPending = n }) }

// WithLeavePendingOnShutdown keeps Kafka's behaviour at shutdown: pending
// operations are left as they are, neither completed nor expired. The
// default expires them all, so no parked request hangs.
func WithLeavePendingOnShutdown() Option {
	return optionFunc(func(c *config) { c.leavePending = true })
}

func defaultConfig() config {
	return config{purgeInterval: DefaultPurgeInterval, shards: watchers.DefaultShards}
}
