package timer

import (
	"time"

	"github.com/purgatory-go/purgatory/internal/core"
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
	m *core.Mock
	engine
}

var _ Timer = (*MockTimer)(nil)

// NewMockTimer returns a MockTimer whose clock starts at zero.
func NewMockTimer() *MockTimer {
	mt := &MockTimer{m: core.NewMock()}
	mt.engine = core.LinkTo(mt, mt.m.Timer)
	return mt
}

// Now returns the timer's current time.
func (m *MockTimer) Now() time.Duration { return m.m.Clock.Now() }

// Advance moves the clock forward by d and runs every task that is due, in
// deadline order. It returns how many tasks ran. Tasks added while it runs are
// due after the new time, so they wait for a later Advance.
func (m *MockTimer) Advance(d time.Duration) int { return m.m.Advance(d) }

// Add implements [Timer].
func (m *MockTimer) Add(task Task) error {
	if task == nil {
		return ErrNilTask
	}
	return m.m.Add(task)
}

// AdvanceClock waits up to timeout for a task to be due, then runs every
// task that is due at the clock's current time, and reports whether any
// ran. The timeout is measured on the mock clock, which moves only when
// Advance is called: the wait ends when another goroutine advances the
// clock past the earliest pending task or by the timeout, or when the
// timer, or a [Reaper] around it, is closed (a Close that comes before
// the wait keeps it from sleeping). A timeout of zero or less does not wait. (Kafka's
// MockTimer ignores the timeout; waiting on the mock clock is what lets a
// [Reaper], or a purgatory that keeps its reaper, run on a MockTimer
// without spinning: it sleeps until the test advances the clock.)
func (m *MockTimer) AdvanceClock(d time.Duration) bool { return m.m.AdvanceClock(d) }

// Size implements [Timer].
func (m *MockTimer) Size() int { return m.m.Size() }

// Close implements [Timer].
func (m *MockTimer) Close() error { return m.m.Close() }

func (m *MockTimer) wake() { m.m.Wake() }
