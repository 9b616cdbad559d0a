// Package hist records durations in fixed log-scale buckets with lock-free
// counters: eight buckets per power of two from 1µs to about 4.9 hours, each
// at most 12.5% wider than its lower bound, plus the smallest and largest
// duration seen. Recording is two atomic adds and two loads (a
// compare-and-swap only for a new extreme) and allocates nothing;
// histograms with the same buckets merge by adding counts. Package timing
// records the time operations spend parked in them, and exports
// snapshots.
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
	perOct   = 8  // buckets per power of two
	subShift = 3  // log2(perOct)

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
	sub := int(d>>(e-subShift)) & (perOct - 1)
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
	return time.Duration((perOct + sub) << (e - subShift)), time.Duration((perOct + sub + 1) << (e - subShift))
}

// Counters is one histogram being recorded: safe for concurrent use, its
// zero value empty.
type Counters struct {
	counts [Buckets]atomic.Uint64
	// sum is in microseconds, each duration rounded: in nanoseconds an
	// int64 overflows after 292 years of time summed, which a broker
	// expiring 20,000 half-second fetches a second sums in 11 days; in
	// microseconds a uint64 lasts 584,000 years of it.
	sum atomic.Uint64
	// lo and hi are the smallest and largest durations recorded, each plus
	// one so that zero means none yet.
	lo, hi atomic.Int64
}

// Record counts one duration of d nanoseconds (negative counts as zero).
func (c *Counters) Record(d int64) {
	d = max(d, 0)
	c.counts[Index(d)].Add(1)
	c.sum.Add(uint64(d+500) / 1000)
	for v := c.hi.Load(); d+1 > v && !c.hi.CompareAndSwap(v, d+1); v = c.hi.Load() {
	}
	for v := c.lo.Load(); (v == 0 || d+1 < v) && !c.lo.CompareAndSwap(v, d+1); v = c.lo.Load() {
	}
}

// Count returns the number of durations recorded.
func (c *Counters) Count() uint64 {
	var n uint64
	for i := range c.counts {
		n += c.counts[i].Load()
	}
	return n
}

// Snapshot is Counters read out: plain values, merged by Add.
type Snapshot struct {
	Counts [Buckets]uint64
	SumUs  uint64 // microseconds
	Lo, Hi int64  // smallest and largest, plus one; zero when empty
}

// AddTo adds c into s.
func (c *Counters) AddTo(s *Snapshot) {
	for i := range c.counts {
		s.Counts[i] += c.counts[i].Load()
	}
	s.SumUs += c.sum.Load()
	s.merge(c.lo.Load(), c.hi.Load())
}

// Add adds o into s.
func (s *Snapshot) Add(o *Snapshot) {
	for i, n := range o.Counts {
		s.Counts[i] += n
	}
	s.SumUs += o.SumUs
	s.merge(o.Lo, o.Hi)
}

func (s *Snapshot) merge(lo, hi int64) {
	if lo != 0 && (s.Lo == 0 || lo < s.Lo) {
		s.Lo = lo
	}
	s.Hi = max(s.Hi, hi)
}
