package timer

import (
	"time"

	"github.com/purgatory-go/purgatory/internal/core"
)

// Clock is the monotonic time source a [SystemTimer] reads deadlines from and
// waits on. [SystemClock] is the default; a [MockTimer] runs on a clock that
// moves only when told to.
type Clock interface {
	// Now returns the time elapsed since a fixed origin of the clock's
	// choosing. It never goes backwards.
	Now() time.Duration

	// NewTimer returns a stopped-or-running one-shot timer on this clock that
	// fires once d has elapsed. The timer is reused with Reset.
	NewTimer(d time.Duration) ClockTimer
}

// ClockTimer is a resettable one-shot timer on a [Clock]. It follows the
// semantics of [time.Timer] since Go 1.23: after Stop or Reset returns, no
// stale value is received from C.
type ClockTimer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// SystemClock is the process's monotonic clock. Its zero value is ready to
// use.
type SystemClock struct{}

// Now returns the monotonic time since the package was initialised, or,
// inside a testing/synctest bubble, the bubble's fake time since it began
// (measured from the bubble's start, midnight UTC on 1 January 2000, since
// a bubble's time.Now carries no monotonic reading). Outside a bubble it
// is one reading of the monotonic clock.
func (SystemClock) Now() time.Duration { return core.SystemNow() }

// NewTimer returns a [time.Timer] wrapped as a ClockTimer.
func (SystemClock) NewTimer(d time.Duration) ClockTimer { return core.NewSystemClockTimer(d) }

// clockOf adapts a Clock of the user's to the core's: the same methods,
// but NewTimer's result is the core's type.
type clockOf struct{ c Clock }

func (a clockOf) Now() time.Duration                       { return a.c.Now() }
func (a clockOf) NewTimer(d time.Duration) core.ClockTimer { return a.c.NewTimer(d) }
