// Package hist records durations in fixed log-scale buckets with lock-free
// counters: four buckets per power of two from 1µs to about 4.9 hours, each
// at most 25% wider than its lower bound. Recording is two
// atomic adds and allocates nothing; histograms with the same buckets merge
// by adding counts. Package purgatory records the time operations spend
// parked, and exports snapshots.
package hist

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

const (
	minShift = 10 // the first bucket holds [0, 1024ns)
	octaves  = 34 // up to 2^44 ns, about 4.9 hours
	perOct   = 4  // buckets per power of two

	// Buckets is the number of buckets, the last one unbounded.
	Buckets = 1 + octaves*perOct + 1
)

// Index returns the bucket that holds d nanoseconds.
func Index(d int64) int {
	if d < 1<<minShift {
		return 0
	}
	e := bits.Len64(uint64(d)) - 1 // 2^e <= d < 2^(e+1)
	if e >= minShift+octaves {
		return Buckets - 1
	}
	sub := int(d>>(e-2)) & (perOct - 1)
	return 1 + (e-minShift)*perOct + sub
}

// Bounds returns bucket i's range [lo, hi); hi is math.MaxInt64 for the
// last bucket.
func Bounds(i int) (lo, hi time.Duration) {
	switch {
	case i <= 0:
		return 0, 1 << minShift
	case i >= Buckets-1:
		return 1 << (minShift + octaves), math.MaxInt64
	}
	e := minShift + (i-1)/perOct
	sub := int64((i - 1) % perOct)
	return time.Duration((perOct + sub) << (e - 2)), time.Duration((perOct + sub + 1) << (e - 2))
}

// Counters is one histogram being recorded: safe for concurrent use, its
// zero value empty.
type Counters struct {
	counts [Buckets]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

// Record counts one duration of d nanoseconds (negative counts as zero).
func (c *Counters) Record(d int64) {
	d = max(d, 0)
	c.counts[Index(d)].Add(1)
	c.sum.Add(d)
}

// AddTo adds c's counts and sum to counts and sum.
func (c *Counters) AddTo(counts *[Buckets]uint64, sum *int64) {
	for i := range c.counts {
		counts[i] += c.counts[i].Load()
	}
	*sum += c.sum.Load()
}
