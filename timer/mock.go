package timer

import (
	"sync"
	"time"
)

// MockTimer is a [Timer] for tests of code that schedules tasks. Its clock
// moves only when Advance is called, and Advance runs every task that has
// become due, on the calling goroutine, in deadline order (tasks due at the
// same instant run in an unspecified order). It is Kafka's MockTimer, built
// on the real wheels with a one-nanosecond tick, so it has the same Add,
// move and Cancel semantics as [SystemTimer].
//
// Add never runs a task, not even one whose delay is zero or less (Kafka's
// MockTimer runs those inside add): that one is due at once and runs at the
// next Advance, Advance(0) included. Code under test may therefore Add while
// holding a lock the task takes.
//
// A MockTimer is safe for concurrent use. Advance and AdvanceClock take
// turns, each whole: when one returns, every task due at the time it moved
// the clock to has run, whichever goroutine advances beside it, and every
// Add that returned before it was called is counted. A task's Run must not
// call Advance or AdvanceClock of its own timer.
type MockTimer struct {
	st    *SystemTimer
	clock *mockClock
	// mu makes each Advance and AdvanceClock whole: the clock's move and
	// the runs of what it made due.
	mu sync.Mutex
}

var _ Timer = (*MockTimer)(nil)

// NewMockTimer returns a MockTimer whose clock starts at zero.
func NewMockTimer() *MockTimer {
	clock := newMockClock()
	st, err := NewSystemTimer("mock", WithClock(clock), WithTick(time.Nanosecond), inlineExecution())
	if err != nil {
		panic("timer: " + err.Error()) // the options above are valid
	}
	return &MockTimer{st: st, clock: clock}
}

// Now returns the timer's current time.
func (m *MockTimer) Now() time.Duration { return m.clock.Now() }

// Advance moves the clock forward by d and runs every task that is due, in
// deadline order. It returns how many tasks ran. Tasks added while it runs are
// due after the new time, so they wait for a later Advance.
func (m *MockTimer) Advance(d time.Duration) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clock.Advance(d)
	return m.runDue()
}

func (m *MockTimer) runDue() int {
	before := m.st.fired.Load()
	for m.st.advanceDue() {
	}
	return int(m.st.fired.Load() - before)
}

// Add implements [Timer].
func (m *MockTimer) Add(task Task) error { return m.st.Add(task) }

// AdvanceClock runs every task that is due at the clock's current time and
// reports whether any ran. It never waits: the timeout is ignored, as in
// Kafka's MockTimer.
func (m *MockTimer) AdvanceClock(time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runDue() > 0
}

// Size implements [Timer].
func (m *MockTimer) Size() int { return m.st.Size() }

// Close implements [Timer].
func (m *MockTimer) Close() error { return m.st.Close() }

func (m *MockTimer) wake() {}
