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
