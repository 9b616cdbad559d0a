package timer

import (
	"time"

	"github.com/purgatory-go/purgatory/internal/core"
)

// MockTimer is a [Timer] for tests of code that schedules tasks. Its clock
// moves only when Advance is called, and Advance moves it as a
// testing/synctest bubble moves its fake time: to each task's deadline in
// turn, in deadline order, running the task there on the calling goroutine,
// so that a Run reads its own deadline from Now (tasks due at the same
// instant run in an unspecified order). It is Kafka's MockTimer, built on
// the real wheels with a one-nanosecond tick, so it has the same Add, move
// and Cancel semantics as [SystemTimer]. A task's deadline is its own: the
// time its Add read plus its delay, to the nanosecond, wherever in the
// wheels it waited (a coarse bucket is moved down before its span starts,
// and the task runs from the one-nanosecond bucket of its deadline).
//
// Add never runs a task, not even one whose delay is zero or less (Kafka's
// MockTimer runs those inside add): that one is due at once and runs at the
// next Advance, Advance(0) included, with the clock where Add found it.
// Code under test may therefore Add while holding a lock the task takes.
//
// A task added during an Advance, by a Run or by another goroutine, runs in
// that Advance if its deadline comes before the advance ends: at its
// deadline, or, with a delay of zero or less, at the instant it was added,
// after the task that added it. So a task that adds itself again with
// delay zero keeps Advance from returning for as long as it does so, as it
// would keep a SystemTimer's executor busy.
//
// A MockTimer is safe for concurrent use. Advance and AdvanceClock take
// turns, each whole: when Advance returns, the clock reads its old time
// plus d, and every task due by then has run (but one that another
// goroutine added after the Advance's last step), whichever goroutine
// advances beside it; every Add that returned before it was called is
// counted.
// While it runs, the clock never passes the deadline of a pending task that
// has not been taken to run: a Cancel, or an Add that moves a task, from a
// Run or another goroutine in the middle of an Advance acts before the
// task's deadline and takes effect, or after its run was taken, and Cancel
// reports false. A task's Run must not call Advance or AdvanceClock of its
// own timer.
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

// Advance moves the clock forward by d, stopping at each deadline on the
// way to run the tasks due there with Now reading it, and returns how many
// tasks ran. Tasks added while it runs with a deadline inside the advance
// run in it, at their deadlines (see [MockTimer]). A d of zero or less runs
// what is due now.
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
