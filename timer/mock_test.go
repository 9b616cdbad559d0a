package timer_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/timer"
)

type named struct {
	timer.TaskBase
	name string
	out  *[]string
}

func (n *named) Run() { *n.out = append(*n.out, n.name) }

func TestMockTimerRunsDueTasksInDeadlineOrder(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	defer mt.Close()
	var out []string
	add := func(name string, d time.Duration) *named {
		n := &named{name: name, out: &out}
		n.SetDelay(d)
		require.NoError(t, mt.Add(n))
		return n
	}
	add("c", 30*time.Millisecond)
	add("a", 10*time.Millisecond)
	cancelled := add("x", 15*time.Millisecond)
	add("b", 20*time.Millisecond+time.Nanosecond)
	add("d", time.Hour)
	assert.Equal(t, 5, mt.Size())
	assert.True(t, cancelled.Cancel())

	assert.Equal(t, 0, mt.Advance(10*time.Millisecond-1))
	assert.Empty(t, out, "nothing is due before its deadline")
	assert.Equal(t, 1, mt.Advance(1))
	assert.Equal(t, []string{"a"}, out)
	assert.Equal(t, 2, mt.Advance(25*time.Millisecond))
	assert.Equal(t, []string{"a", "b", "c"}, out)
	assert.Equal(t, 1, mt.Size())
	assert.False(t, mt.AdvanceClock(0))
	assert.Equal(t, 1, mt.Advance(time.Hour))
	assert.Equal(t, []string{"a", "b", "c", "d"}, out)
	assert.Equal(t, 0, mt.Size())
}

// Unlike Kafka's MockTimer, Add never runs a task, even one already due:
// it runs at the next Advance, Advance(0) included, so that code may Add
// while holding a lock the task takes.
func TestMockTimerRunsDueTaskAtTheNextAdvance(t *testing.T) {
	mt := timer.NewMockTimer()
	defer mt.Close()
	var out []string
	n := &named{name: "now", out: &out}
	require.NoError(t, mt.Add(n))
	assert.Empty(t, out, "Add runs nothing")
	assert.Equal(t, 1, mt.Size())
	assert.Equal(t, 1, mt.Advance(0))
	assert.Equal(t, []string{"now"}, out)
	assert.Zero(t, mt.Size())
}

// Regression: near the end of the clock's range a MockTimer still never
// runs a task before its deadline. A deadline past math.MaxInt64 (a
// saturated one) or in a tick that starts past it never comes; one just
// inside the range comes exactly on time.
func TestMockTimerNeverEarlyAtTheEndOfTime(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	defer mt.Close()
	mt.Advance(math.MaxInt64 - time.Hour)
	var out []string
	add := func(name string, d time.Duration) {
		n := &named{name: name, out: &out}
		n.SetDelay(d)
		require.NoError(t, mt.Add(n))
	}
	add("max", math.MaxInt64)
	add("max-1", math.MaxInt64-1)
	add("hour", time.Hour) // due at exactly math.MaxInt64
	add("hour-1ns", time.Hour-time.Nanosecond)
	add("half", 30*time.Minute)

	assert.Equal(t, 0, mt.Advance(30*time.Minute-time.Nanosecond))
	assert.Equal(t, 1, mt.Advance(time.Nanosecond))
	assert.Equal(t, []string{"half"}, out)
	assert.Equal(t, 0, mt.Advance(30*time.Minute-2*time.Nanosecond))
	assert.Equal(t, 1, mt.Advance(time.Nanosecond), "due at math.MaxInt64-1")
	assert.Equal(t, []string{"half", "hour-1ns"}, out)
	mt.Advance(time.Hour) // the clock saturates at math.MaxInt64
	assert.Equal(t, math.MaxInt64, int(mt.Now()))
	assert.Equal(t, []string{"half", "hour-1ns"}, out, "deadlines at or past the end of the range never come")
	assert.Equal(t, 3, mt.Size(), "they stay pending, and cancellable")
}

// clocked is a task that notes the time its timer reads when it runs.
type clocked struct {
	timer.TaskBase
	mt   *timer.MockTimer
	name string
	out  *[]string
	at   *[]time.Duration
	then func() // if not nil, called at the end of Run
}

func (c *clocked) Run() {
	*c.out = append(*c.out, c.name)
	*c.at = append(*c.at, c.mt.Now())
	if c.then != nil {
		c.then()
	}
}

// Issue 43, 1: Advance moves the clock to each task's deadline and runs
// it there, in deadline order, as a testing/synctest bubble moves its
// fake time to each timer's: tasks due at 3, 7 and 10 ms read 3, 7 and
// 10 ms in their Run, and the clock reads the end of the advance once it
// returns. A task that a Run adds with a deadline inside the advance runs
// in it at its own deadline; one whose deadline is past the end waits.
// TestMockTimerRunsTasksAtTheirDeadlinesInABubble runs the same inside a
// bubble.
func TestMockTimerRunsTasksAtTheirDeadlines(t *testing.T) {
	t.Parallel()
	checkTasksRunAtTheirDeadlines(t)
}

func checkTasksRunAtTheirDeadlines(t *testing.T) {
	mt := timer.NewMockTimer()
	defer mt.Close()
	var out []string
	var at []time.Duration
	add := func(name string, d time.Duration) *clocked {
		c := &clocked{mt: mt, name: name, out: &out, at: &at}
		c.SetDelay(d)
		require.NoError(t, mt.Add(c))
		return c
	}
	ms := time.Millisecond
	add("10", 10*ms)
	seven := add("7", 7*ms)
	add("3", 3*ms)
	// The task due at 7 ms adds one due 2 ms later, inside the advance,
	// and one due 5 ms later, after it.
	seven.then = func() {
		add("7+2", 2*ms)
		add("7+5", 5*ms)
	}
	mt.Advance(time.Millisecond) // a step before any is due
	assert.Equal(t, 4, mt.Advance(9*ms))
	assert.Equal(t, []string{"3", "7", "7+2", "10"}, out)
	assert.Equal(t, []time.Duration{3 * ms, 7 * ms, 9 * ms, 10 * ms}, at, "each ran with the clock at its deadline")
	assert.Equal(t, 10*ms, mt.Now(), "the clock is at the end of the advance")
	assert.Equal(t, 1, mt.Size())

	// A deadline far off sits in a coarse bucket, which is moved down
	// before it is due: the task still runs at its own deadline, to the
	// nanosecond, not at the start of its bucket's span or at the end of
	// the advance.
	add("far", time.Hour+3*time.Nanosecond)
	assert.Equal(t, 2, mt.Advance(2*time.Hour))
	assert.Equal(t, []string{"3", "7", "7+2", "10", "7+5", "far"}, out)
	assert.Equal(t, []time.Duration{3 * ms, 7 * ms, 9 * ms, 10 * ms, 12 * ms, 10*ms + time.Hour + 3}, at)
	assert.Equal(t, 10*ms+2*time.Hour, mt.Now())
}

// Issue 43, 2: a task added by a Run during an Advance runs in that
// Advance if its deadline is inside it: one added with delay zero runs
// later in the same Advance, at the same instant. A task that adds itself
// again with delay zero therefore keeps that Advance from returning for as
// long as it does so, as it would keep a SystemTimer's executor busy;
// here it stops after 100 runs.
func TestMockTimerRunsZeroDelayTasksAddedDuringAnAdvance(t *testing.T) {
	t.Parallel()
	mt := timer.NewMockTimer()
	defer mt.Close()
	var out []string
	var at []time.Duration
	again := &clocked{mt: mt, name: "again", out: &out, at: &at}
	runs := 0
	again.then = func() {
		if runs++; runs < 100 {
			require.NoError(t, mt.Add(again)) // its delay is still zero
		}
	}
	first := &clocked{mt: mt, name: "first", out: &out, at: &at}
	first.SetDelay(5 * time.Millisecond)
	first.then = func() { require.NoError(t, mt.Add(again)) }
	require.NoError(t, mt.Add(first))

	assert.Equal(t, 101, mt.Advance(time.Second), "first, then again 100 times, in one Advance")
	assert.Equal(t, 100, runs)
	for i, d := range at {
		assert.Equal(t, 5*time.Millisecond, d, "run %d: a zero delay runs at the instant it was added", i)
	}
	assert.Equal(t, time.Second, mt.Now())
	assert.Zero(t, mt.Size())
}
