package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The demo scenario in a short mode: every request is answered, completed
// early, expired or refused, and the slow follower makes some produces
// expire. The progress lines, written to something that is not a terminal,
// carry no carriage returns.
func TestScenarioCountsAddUp(t *testing.T) {
	var progress bytes.Buffer
	s, err := RunScenario(ScenarioConfig{
		Duration: time.Second, ProduceRate: 300, Topics: []string{"a", "b"}, Partitions: 2, Replicas: 2,
		Lag: time.Millisecond, SlowLag: 300 * time.Millisecond, ProduceTimeout: 150 * time.Millisecond,
		MaxWait: 100 * time.Millisecond, MinBytes: 32, Progress: &progress, ProgressEvery: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	for _, k := range []kindSummary{s.Produce, s.Fetch} {
		assert.Greater(t, k.Requests, 0)
		assert.Equal(t, k.Requests, k.CompletedEarly+k.Expired+k.Refused, "requests = completed early + expired + refused")
	}
	assert.Greater(t, s.Produce.CompletedEarly, 0, "most produces are replicated in time")
	assert.Greater(t, s.Produce.Expired, 0, "the slow follower makes some expire")
	assert.Equal(t, s.Produce.Expired, s.ExpiredWithTimedOut, "each expired produce says REQUEST_TIMED_OUT")

	out := progress.String()
	assert.NotContains(t, out, "\r")
	assert.GreaterOrEqual(t, strings.Count(out, "\n"), 3, "a line every 100ms for a second")
}

// The servers' broker gets the scenario's slow follower too (-slow-lag).
func TestServersBrokerHasTheSlowFollower(t *testing.T) {
	c := ScenarioConfig{Topics: []string{"a"}, Partitions: 2, Replicas: 2, Lag: time.Millisecond, SlowLag: 700 * time.Millisecond}
	b, err := c.newBroker()
	require.NoError(t, err)
	defer b.Close(t.Context())
	assert.Equal(t, int64(700*time.Millisecond), b.partitions[tpKey{Topic: "a"}].followers[0].lag.Load())
	assert.Equal(t, int64(time.Millisecond), b.partitions[tpKey{Topic: "a"}].followers[1].lag.Load())
	assert.Equal(t, int64(time.Millisecond), b.partitions[tpKey{Topic: "a", Partition: 1}].followers[0].lag.Load())
}
