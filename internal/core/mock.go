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

// Advance moves the clock forward by d in steps, to each time a bucket is
// due, and there runs what is due before the next step: every task runs
// with the clock at its own deadline (a finest bucket spans one
// nanosecond, so a task fires from the bucket of its own instant; a
// coarse bucket is moved down at the time it is due, a span before its
// tasks), in deadline order, and tasks a Run adds with a deadline inside
// the advance run in it, at theirs. The clock ends at its old time plus
// d. It returns how many tasks ran.
//
// Each step moves the clock inside a turn, under the timer's write lock:
// an Add or a Reschedule comes wholly before the move (its deadline
// measured on the old clock, and due now if it is due at the new one) or
// wholly after the turn that handles what the move made due. No step
// passes the head of the delay queue, and each runs until the queue has
// nothing due and no bucket is being moved down, so between turns the
// clock never reads past the deadline of a pending entry that has not
// fired.
func (m *Mock) Advance(d time.Duration) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	before, _ := m.Counts()
	end := addSat(m.Clock.Now(), max(d, 0))
	for {
		var at time.Duration
		m.turn(func() {
			at = end
			if head, ok := m.queue.head(); ok && head < at {
				at = head
			}
			m.Clock.Set(at)
		})
		for m.AdvanceDue() {
		}
		if at >= end {
			break
		}
	}
	after, _ := m.Counts()
	return int(after - before)
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
	return m.runDue() > 0
}

// runDue runs every task that is due and returns how many ran. The
// caller holds mu.
func (m *Mock) runDue() int {
	before, _ := m.Counts()
	for m.AdvanceDue() {
	}
	after, _ := m.Counts()
	return int(after - before)
}
