package timer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/purgatory-go/purgatory/internal/core"
)

// Errors returned by this package. Check them with [errors.Is].
var (
	// ErrClosed is returned by Add once the timer has been closed. The task
	// is neither run nor kept.
	ErrClosed = core.ErrClosed
	// ErrNilTask is returned by Add for a nil task.
	ErrNilTask = errors.New("timer: nil task")
	// ErrInvalidOption is returned by NewSystemTimer for an option out of
	// range: a tick of zero or less, a wheel size below 2 (with one bucket
	// a level would overflow into a level with the same tick, for ever) or
	// above 4096, a negative number of executors, a nil clock. The
	// error's text says which.
	ErrInvalidOption = errors.New("timer: invalid option")
)

// The defaults, as in Kafka's SystemTimer.
const (
	defaultTick      = time.Millisecond
	defaultWheelSize = 20
)

// reaperPoll is how long a Reaper waits in AdvanceClock per call (Kafka's
// SystemTimerReaper WORK_TIMEOUT_MS).
const reaperPoll = 200 * time.Millisecond

// Option configures a SystemTimer.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tick      time.Duration
	wheelSize int
	clock     Clock
	executors int
	onPanic   func(Task, any)
	logger    *slog.Logger
}

// core returns the core's configuration for a timer named name.
func (c *config) core(name string) core.Config {
	cc := core.Config{
		Name:      name,
		Tick:      c.tick,
		WheelSize: c.wheelSize,
		Executors: c.executors,
		Logger:    c.logger,
	}
	if _, ok := c.clock.(SystemClock); !ok {
		cc.Clock = clockOf{c.clock}
	}
	if f := c.onPanic; f != nil {
		cc.OnPanic = func(task core.Sealed, recovered any) {
			t, _ := task.(Task)
			f(t, recovered)
		}
	}
	return cc
}

func defaultConfig() config {
	return config{
		tick:      defaultTick,
		wheelSize: defaultWheelSize,
		clock:     SystemClock{},
		executors: 1,
	}
}

func (c *config) validate() error {
	bad := func(why string) error { return fmt.Errorf("%w: %s", ErrInvalidOption, why) }
	switch {
	case c.tick <= 0:
		return bad("tick must be positive")
	case c.wheelSize < 2 || c.wheelSize > maxWheelSize:
		return bad(fmt.Sprintf("wheel size must be from 2 to %d", maxWheelSize))
	case c.executors < 0:
		return bad("executors must not be negative")
	case c.clock == nil:
		return bad("nil clock")
	}
	return nil
}

// WithTick sets the span of one bucket of the finest wheel, which is also the
// timer's precision: a task runs no earlier than its deadline and at most one
// tick after it, plus scheduling delay. A finer tick means more wake-ups of
// the reaper and more cascading of entries between levels. The default is
// 1ms, as in Kafka.
func WithTick(d time.Duration) Option {
	return optionFunc(func(c *config) { c.tick = d })
}

// WithWheelSize sets n, the wheel size: each level spans n of its own ticks
// ahead, and the next level's tick is n of this one's. A larger wheel means
// fewer levels (less cascading for long delays) at the cost of memory: a
// level holds 2n buckets (it overlaps the next level by one span, see
// package doc) of 640 bytes each, so 25 KiB a level for the default n = 20
// (Kafka's), and levels are created as delays need them. NewSystemTimer
// allocates the finest level at once; n must be from 2 to 4096, whose levels
// take 5 MiB each.
func WithWheelSize(n int) Option {
	return optionFunc(func(c *config) { c.wheelSize = n })
}

// maxWheelSize is the largest wheel size WithWheelSize accepts.
const maxWheelSize = 4096

// WithClock sets the clock deadlines are read from and waited on. The default
// is [SystemClock]. For deterministic tests use a [MockTimer], or run the
// test inside a testing/synctest bubble, on whose fake time SystemClock runs.
func WithClock(clk Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// WithExecutors sets how many goroutines run expired tasks. The default is 1,
// as in Kafka, which runs tasks in expiry order; more goroutines keep a slow
// task from delaying the others but run tasks out of order.
//
// Zero runs expired tasks on the goroutine that calls AdvanceClock (the
// Reaper's), after it releases the timer's locks. Expiry is then one
// goroutine's work instead of two: on a busy machine, where every goroutine
// that wakes may wait for a processor, that halves the waits an expiry is
// exposed to. The price is that a slow Run delays the timer itself.
func WithExecutors(n int) Option {
	return optionFunc(func(c *config) { c.executors = n })
}

// WithPanicHandler sets a function called, on the goroutine that ran the
// task, with the task and the recovered value when a task's Run panics (the
// task is nil for a delayed operation's timeout, whose callbacks package
// purgatory recovers itself). The
// timer keeps working either way. The default logs the panic at error level
// with the timer's logger.
func WithPanicHandler(f func(task Task, recovered any)) Option {
	return optionFunc(func(c *config) { c.onPanic = f })
}

// WithLogger sets the logger for recovered panics. The default is
// [slog.Default].
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}
