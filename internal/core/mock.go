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
func (m *Mock) Advance(d time.Duration) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Clock.Advance(d)
	return m.runDue()
}

// AdvanceClock runs every task that is due at the clock's current time and
// reports whether any ran. It never waits. It hides the Timer's, which
// would wait on the clock, and take the due buckets without mu.
func (m *Mock) AdvanceClock(time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runDue() > 0
}

func (m *Mock) runDue() int {
	before, _ := m.Counts()
	for m.AdvanceDue() {
	}
	after, _ := m.Counts()
	return int(after - before)
}
