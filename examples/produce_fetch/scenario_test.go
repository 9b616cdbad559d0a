package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The demo scenario in a short mode: every request is answered, completed
// early or expired, and the slow follower makes some produces expire.
func TestScenarioCountsAddUp(t *testing.T) {
	s, err := RunScenario(ScenarioConfig{
		Duration: time.Second, ProduceRate: 300, Topics: []string{"a", "b"}, Partitions: 2, Replicas: 2,
		Lag: time.Millisecond, SlowLag: 300 * time.Millisecond, ProduceTimeout: 150 * time.Millisecond,
		MaxWait: 100 * time.Millisecond, MinBytes: 32,
	})
	require.NoError(t, err)
	for _, k := range []kindSummary{s.Produce, s.Fetch} {
		assert.Greater(t, k.Requests, 0)
		assert.Equal(t, k.Requests, k.CompletedEarly+k.Expired, "requests = completed early + expired")
	}
	assert.Greater(t, s.Produce.CompletedEarly, 0, "most produces are replicated in time")
	assert.Greater(t, s.Produce.Expired, 0, "the slow follower makes some expire")
	assert.Equal(t, s.Produce.Expired, s.ExpiredWithTimedOut, "each expired produce says REQUEST_TIMED_OUT")
}
