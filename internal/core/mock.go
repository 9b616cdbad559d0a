package core

import (
	"sync"
	"time"
)

// Mock is package timer's MockTimer: a Timer with a one-nanosecond tick on
// a MockClock, that runs expired tasks on the goroutine advancing it.
type Mock struct {
	*Timer
	Clock *MockClock
	// mu makes each Advance and AdvanceClock whole: the clock's move and the
	// runs of what it made due.
	mu sync.Mutex
}

// NewMock returns a Mock whose clock starts at zero.
func NewMock() *Mock {
	clock := NewMockClock()
	t := New(Config{Name: "mock", Tick: time.Nanosecond, WheelSize: 20, Clock: clock})
	return &Mock{Timer: t, Clock: clock}
}

// Advance moves the clock forward by d and runs every task that is due, in
// deadline order. It returns how many tasks ran.
//
// The clock moves inside the first turn, under the timer's write lock:
// an Add or a Reschedule comes wholly before the move (its deadline
// measured on the old clock, and due now if it is due at the new one) or
// wholly after the turn that handles what the move made due.
func (m *Mock) Advance(d time.Duration) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runDue(func() { m.Clock.Advance(d) })
}

// AdvanceClock waits up to timeout, on the mock clock, for a task to be
// due, then runs every task that is due and reports whether any ran. The
// mock clock moves only when Advance is called, so a wait ends when a
// goroutine advances the clock past the head bucket or by the timeout, or
// when the timer is closed; a timeout of zero or less does not wait. A
// Reaper, or a purgatory's reaper, on a Mock therefore sleeps between
// Advances rather than spinning. The wait takes the due buckets out of
// nothing: Advance runs them, or the turn after the wait does, under mu.
func (m *Mock) AdvanceClock(timeout time.Duration) bool {
	if timeout > 0 && !m.shut.Load() {
		m.pollMu.Lock()
		m.queue.wait(timeout)
		m.pollMu.Unlock()
		m.queue.done()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runDue(nil) > 0
}

// runDue runs every task that is due, after a first turn that calls move
// (if not nil) under the write lock, and returns how many ran. The caller
// holds mu.
func (m *Mock) runDue(move func()) int {
	before, _ := m.Counts()
	if move != nil {
		m.turn(move)
	}
	for m.AdvanceDue() {
	}
	after, _ := m.Counts()
	return int(after - before)
}
