package core

import (
	"sync"
	"time"
)

// Clock is the monotonic time source a Timer reads deadlines from and
// waits on: package timer's Clock, whose users' clocks it adapts.
type Clock interface {
	Now() time.Duration
	NewTimer(d time.Duration) ClockTimer
}

// ClockTimer is a resettable one-shot timer on a Clock, with the semantics
// of time.Timer since Go 1.23: after Stop or Reset returns, no stale value
// is received from C.
type ClockTimer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// epoch anchors SystemNow; the difference of two monotonic readings reads
// only the monotonic clock.
var epoch = time.Now()

// bubbleEpoch is where the fake time of a testing/synctest bubble starts.
var bubbleEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// SystemNow returns the monotonic time since the package was initialised,
// or, inside a testing/synctest bubble, the bubble's fake time since it
// began. A bubble's time.Now carries no monotonic reading (it is the fake
// wall clock, which starts at midnight UTC on 1 January 2000 and only
// moves forward), and measured from epoch it would be decades below zero.
//
// Outside a bubble it is one reading of the monotonic clock: time.Since of
// a time with a monotonic reading reads nothing else. Inside one, Since
// falls back to the fake wall clock and comes out below zero, which is
// how the bubble is told apart.
func SystemNow() time.Duration {
	if d := time.Since(epoch); d >= 0 {
		return d
	}
	return time.Since(bubbleEpoch)
}

// systemClock is the Clock that SystemNow reads, and whose timers are the
// runtime's.
type systemClock struct{}

func (systemClock) Now() time.Duration { return SystemNow() }

func (systemClock) NewTimer(d time.Duration) ClockTimer { return NewSystemClockTimer(d) }

// NewSystemClockTimer returns a time.Timer of d wrapped as a ClockTimer,
// for package timer's SystemClock too.
func NewSystemClockTimer(d time.Duration) ClockTimer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time   { return s.t.C }
func (s sysTimer) Reset(d time.Duration) { s.t.Reset(d) }
func (s sysTimer) Stop()                 { s.t.Stop() }

// MockClock is the Clock of package timer's MockTimer: it moves only when
// Advance or Set is called. It starts at zero. It is safe for concurrent
// use. Timers created from it fire during the Advance that reaches their
// deadline.
type MockClock struct {
	mu     sync.Mutex
	now    time.Duration
	timers map[*mockClockTimer]struct{}
}

// NewMockClock returns a MockClock at time zero.
func NewMockClock() *MockClock {
	return &MockClock{timers: make(map[*mockClockTimer]struct{})}
}

// Now returns the clock's current time.
func (c *MockClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d is ignored) and fires
// every timer whose deadline has been reached.
func (c *MockClock) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.mu.Lock()
	c.now = addSat(c.now, d)
	c.fireLocked()
	c.mu.Unlock()
}

// Set moves the clock to t if t is later than the current time.
func (c *MockClock) Set(t time.Duration) {
	c.mu.Lock()
	if t > c.now {
		c.now = t
		c.fireLocked()
	}
	c.mu.Unlock()
}

func (c *MockClock) fireLocked() {
	for mt := range c.timers {
		if mt.when <= c.now {
			delete(c.timers, mt)
			select {
			case mt.ch <- time.Time{}:
			default:
			}
		}
	}
}

// Armed reports how many of the clock's timers are set to fire: a test's
// way to know that a goroutine sleeps on the clock.
func (c *MockClock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NewTimer returns a timer that fires when the clock reaches Now()+d.
func (c *MockClock) NewTimer(d time.Duration) ClockTimer {
	mt := &mockClockTimer{c: c, ch: make(chan time.Time, 1)}
	mt.Reset(d)
	return mt
}

type mockClockTimer struct {
	c    *MockClock
	ch   chan time.Time
	when time.Duration // guarded by c.mu
}

func (t *mockClockTimer) C() <-chan time.Time { return t.ch }

func (t *mockClockTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.drainLocked()
	t.when = addSat(t.c.now, d)
	if t.when <= t.c.now {
		t.ch <- time.Time{}
		return
	}
	t.c.timers[t] = struct{}{}
}

func (t *mockClockTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.drainLocked()
}

// drainLocked unregisters the timer and drops a value not yet received, so
// that, as with time.Timer, nothing stale is seen after Stop or Reset.
func (t *mockClockTimer) drainLocked() {
	delete(t.c.timers, t)
	select {
	case <-t.ch:
	default:
	}
}

// addSat returns a+b, saturating instead of overflowing. b must be >= 0.
func addSat(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}
