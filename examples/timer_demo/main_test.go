package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every timeout ends one way, so the counts the demo prints add up, and none
// ran before its deadline.
func TestCountsAddUp(t *testing.T) {
	r, err := run(2000, 50*time.Millisecond, 0.5)
	require.NoError(t, err)
	assert.Equal(t, r.Parked, r.Cancelled+r.Expired(), "parked = cancelled + expired")
	assert.LessOrEqual(t, r.Cancelled, r.Attempted)
	assert.Greater(t, r.Cancelled, 0)
	assert.Greater(t, r.Expired(), 0)
	for _, l := range r.late {
		require.GreaterOrEqual(t, l, time.Duration(0), "no timeout runs before its deadline")
	}
}
