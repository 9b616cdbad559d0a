package purgatory

import (
	"errors"
	"log/slog"

	"github.com/purgatory-go/purgatory/timer"
	"github.com/purgatory-go/purgatory/watchers"
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
	// in a purgatory, or already completed.
	ErrAlreadyWatched = errors.New("purgatory: operation already watched or completed")
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
	noTimer       bool
	noReaper      bool
	purgeInterval int
	brokerID      int
	logger        *slog.Logger
	shards        int
	leavePending  bool
	timerOpts     []timer.Option
}

func (c *config) validate() error {
	if c.purgeInterval < 0 {
		return errors.Join(ErrInvalidOption, errors.New("purge interval must not be negative"))
	}
	if c.shards < 0 {
		return errors.Join(ErrInvalidOption, errors.New("shards must not be negative"))
	}
	if c.timer != nil && c.noTimer {
		return errors.Join(ErrInvalidOption, errors.New("WithTimer and WithoutTimer together"))
	}
	return nil
}

// WithTimer makes the purgatory use t for timeouts instead of creating a
// SystemTimer. Shutdown closes it. A timer.MockTimer with WithoutReaper
// makes expiry deterministic in tests.
func WithTimer(t timer.Timer) Option { return optionFunc(func(c *config) { c.timer = t }) }

// WithTimerOptions passes options to the SystemTimer the purgatory creates.
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

// WithLeavePendingOnShutdown keeps Kafka's behaviour at shutdown: pending
// operations are left as they are, neither completed nor expired. The
// default expires them all, so no parked request hangs.
func WithLeavePendingOnShutdown() Option {
	return optionFunc(func(c *config) { c.leavePending = true })
}

func defaultConfig() config {
	return config{purgeInterval: DefaultPurgeInterval, shards: watchers.DefaultShards}
}
