//go:build go1.25

package timer_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/timer"
)

// SystemClock is right inside a testing/synctest bubble: it measures the
// bubble's fake time, from zero up, and moves exactly as the bubble's
// time does. Before, it measured from the package's load, outside the
// bubble, and read decades below zero.
func TestSystemClockInsideABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var clk timer.SystemClock
		start := clk.Now()
		assert.GreaterOrEqual(t, start, time.Duration(0))
		time.Sleep(3 * time.Second)
		assert.Equal(t, start+3*time.Second, clk.Now())
		st, err := timer.NewSystemTimer("bubble")
		require.NoError(t, err)
		defer st.Close()
		assert.Equal(t, clk.Now(), st.Now(), "one origin: the timer reads its clock")
	})
	var clk timer.SystemClock
	a := clk.Now()
	assert.Greater(t, a, time.Duration(0))
	assert.GreaterOrEqual(t, clk.Now(), a)
}

// Issue 43, 1: a MockTimer's tasks read their own deadlines inside a
// testing/synctest bubble too: the mock's clock is its own, and Advance
// runs on the calling goroutine, so the bubble changes nothing.
func TestMockTimerRunsTasksAtTheirDeadlinesInABubble(t *testing.T) {
	synctest.Test(t, checkTasksRunAtTheirDeadlines)
}
