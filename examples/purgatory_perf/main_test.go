package main

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every implementation completes every request exactly once, by completion
// or by expiry, and never expire one early, parked by one goroutine or by
// three.
func TestRunCountsAddUp(t *testing.T) {
	for _, impl := range []string{"purgatory", "naive", "floor", "purgatory/producers=3"} {
		t.Run(impl, func(t *testing.T) {
			producers := 1
			if i := strings.Index(impl, "/producers="); i >= 0 {
				producers, _ = strconv.Atoi(impl[i+len("/producers="):])
				impl = impl[:i]
			}
			mixed := config{num: 3000, keys: 3, keySpace: 10, rate: 0, timeout: 40 * time.Millisecond,
				pct50: 30, pct75: 45, impl: impl, producers: producers}
			r := run(mixed)
			assert.Equal(t, int64(mixed.num), r.completed, "every request completes once")
			assert.Greater(t, r.expired, int64(0), "some latencies exceed the timeout")
			assert.Less(t, r.expired, int64(mixed.num), "some complete in time")
			assert.Equal(t, 0, r.early)

			all := mixed
			all.pct50, all.pct75 = 10_000, 10_000 // every latency is far past the timeout
			r = run(all)
			assert.Equal(t, int64(all.num), r.expired)
			assert.Equal(t, 0, r.early)
			assert.GreaterOrEqual(t, r.lateP50, time.Duration(0))
		})
	}
}

func TestBadFlags(t *testing.T) {
	good := config{num: 1, keys: 1, keySpace: 1, timeout: time.Second, pct50: 1, pct75: 2, impl: "naive"}
	assert.NoError(t, good.validate())
	for _, bad := range []func(*config){
		func(c *config) { c.num = 0 },
		func(c *config) { c.keys = 0 },
		func(c *config) { c.rate = -1 },
		func(c *config) { c.timeout = 0 },
		func(c *config) { c.pct75 = 0.5 },
		func(c *config) { c.impl = "other" },
		func(c *config) { c.producers = 2 }, // more than -num
		func(c *config) { c.producers = -1 },
	} {
		c := good
		bad(&c)
		assert.Error(t, c.validate())
	}
}

// -timeline accounts for every expiry once, in windows that rise, with the
// run's largest lateness as the largest of any window's; in each window,
// the lateness counted from the parks' returns is at most that counted
// from the arrivals, by at most the longest park.
func TestTimeline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeline")
	c := config{num: 2000, keys: 3, keySpace: 10, timeout: 30 * time.Millisecond,
		pct50: 10_000, pct75: 10_000, impl: "purgatory", timeline: path}
	r := run(c)
	require.Equal(t, int64(c.num), r.expired)

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.True(t, strings.HasPrefix(lines[0], "# "), "a header")
	var expired int64
	maxLate, prev := -1.0, int64(math.MinInt64)
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		require.Len(t, f, 6, l)
		start, err := strconv.ParseInt(f[0], 10, 64)
		require.NoError(t, err)
		assert.Greater(t, start, prev, "windows rise")
		prev = start
		n, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		expired += n
		if f[2] != "-" {
			var late [3]float64 // from arrival, from the park's return, the longest park
			for j := range late {
				late[j], err = strconv.ParseFloat(f[2+j], 64)
				require.NoError(t, err)
			}
			maxLate = max(maxLate, late[0])
			assert.LessOrEqual(t, late[1], late[0], l)
			assert.GreaterOrEqual(t, late[2], 0.0, l)
			assert.GreaterOrEqual(t, late[1]+late[2], late[0]-0.02, l) // three roundings to 0.01
		}
	}
	assert.Equal(t, r.expired, expired)
	assert.InDelta(t, ms(r.lateMx), maxLate, 0.01)
}
