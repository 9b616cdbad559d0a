package optest

import (
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/timer"
)

// StepClock is a timer.Clock that moves only when Step is called, and
// whose timers never fire: a SystemTimer on it, advanced with
// AdvanceClock(0), does the same work on every run whatever the machine
// does meanwhile. The benchmarks of the hot paths run on it, so that
// their instruction counts (make icount) repeat.
type StepClock struct{ now atomic.Int64 }

// Now returns the clock's time.
func (c *StepClock) Now() time.Duration { return time.Duration(c.now.Load()) }

// Step moves the clock forward by d.
func (c *StepClock) Step(d time.Duration) { c.now.Add(int64(d)) }

// NewTimer returns a timer that never fires.
func (c *StepClock) NewTimer(time.Duration) timer.ClockTimer { return stuck{} }

type stuck struct{}

func (stuck) C() <-chan time.Time { return nil }
func (stuck) Reset(time.Duration) {}
func (stuck) Stop()               {}
