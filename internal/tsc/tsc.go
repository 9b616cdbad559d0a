// Package tsc reads a monotonic clock cheaply where the CPU allows it: from
// the time-stamp counter, scaled by a rate measured against the clock
// itself and re-anchored to it every few milliseconds. Reading the system
// clock costs a vDSO call (about 50 ns on the project's 2-core VM); the
// counter costs a third of that. Package purgatory uses it for the end of
// an operation's time in purgatory, a figure for a histogram whose buckets
// are 12.5% wide, where an error of a microsecond does not show.
//
// The counter is used only on linux/amd64 and only when the kernel itself
// keeps time with it (clocksource "tsc"): the kernel then vouches that the
// counter runs at a constant rate and agrees across cores. Elsewhere New
// returns the exact clock unchanged.
package tsc

import (
	"sync/atomic"
	"time"
)

const (
	// calibrate is how long the exact clock must have run since the first
	// anchor before the counter's rate is trusted; until then Now reads
	// the exact clock. The rate is measured from that first anchor to the
	// newest, so it gets more precise the longer the process runs.
	calibrate = 10 * time.Millisecond
	// reanchorEvery bounds how far Now extrapolates from an anchor.
	reanchorEvery = 10 * time.Millisecond
	// maxSkew, plus maxDrift of the time since the last anchor, is how far
	// an extrapolation may be from the exact clock when the next anchor is
	// taken. Further means the counter did not keep pace (a suspended or
	// migrated machine), and the rate is measured afresh.
	maxSkew  = 20 * time.Microsecond
	maxDrift = 1e-4
	// maxScale is the most nanoseconds a tick that Now handles (a counter
	// of 1 MHz): limit*mult must stay below 2^63.
	maxScale = 1000
)

// clock is the exact clock read through the counter. Its zero value is not
// usable; make one with newClock.
type clock struct {
	exact   func() int64
	counter func() int64           // nil: rdtsc, called directly
	cur     atomic.Pointer[anchor] // what Now extrapolates from
	base    atomic.Pointer[anchor] // where the rate is measured from
	// Every Now reads cur, on whatever core: the padding keeps objects
	// that others write off its cache line.
	_ [128 - 32]byte
}

// anchor is one reading of both clocks.
type anchor struct {
	ticks int64   // the counter, halfway between two reads around ns
	ns    int64   // the exact clock
	scale float64 // nanoseconds per tick; 0 until calibrated
	mult  uint64  // scale in 32.32 fixed point, for Now
	limit int64   // ticks after which Now takes a new anchor
	// An anchor is read by every Now: 128 bytes is a size class of its
	// own, aligned to cache lines, which other objects cannot share.
	_ [128 - 40]byte
}

// New returns a function that reads exact, in nanoseconds, through the
// counter when there is one the kernel trusts, and exact itself otherwise.
// Its readings may differ from exact's by a few microseconds.
func New(exact func() int64) func() int64 {
	if !trusted() {
		return exact
	}
	return newClock(exact, nil).Now
}

func newClock(exact, counter func() int64) *clock {
	c := &clock{exact: exact, counter: counter}
	c.cur.Store(&anchor{}) // uncalibrated: the first Now anchors
	return c
}

// Now reads the clock.
func (c *clock) Now() int64 {
	a := c.cur.Load()
	d := c.read() - a.ticks
	// A negative d (a counter behind the anchor) is a huge unsigned one,
	// and an uncalibrated anchor has a limit of 0.
	if uint64(d) > uint64(a.limit) || a.mult == 0 {
		return c.reanchor()
	}
	// d is at most limit, reanchorEvery/scale ticks, so d*mult is about
	// reanchorEvery<<32, 4.3e16: far from overflowing.
	return a.ns + int64(uint64(d)*a.mult>>32)
}

func (c *clock) read() int64 {
	if c.counter == nil {
		return rdtsc()
	}
	return c.counter()
}

// reanchor reads the exact clock, returns it, and makes it the anchor of
// later reads when it can tell what counter value it goes with. Goroutines
// that re-anchor at once each store a valid anchor; the last one stays.
func (c *clock) reanchor() int64 {
	t0 := c.read()
	ns := c.exact()
	t1 := c.read()
	if t1 < t0 {
		return ns // the counter went back: not a pair to anchor on
	}
	prev := c.cur.Load()
	if prev.scale != 0 && float64(t1-t0)*prev.scale > float64(maxSkew) {
		return ns // preempted between the reads: not a precise pair
	}
	mid := t0 + (t1-t0)/2
	base := c.base.Load()
	if base == nil || mid <= base.ticks || ns <= base.ns {
		c.restart(mid, ns)
		return ns
	}
	if ns-base.ns < int64(calibrate) {
		return ns
	}
	if prev.scale != 0 {
		want := prev.ns + int64(float64(mid-prev.ticks)*prev.scale)
		if skew := abs(want - ns); skew > int64(maxSkew)+int64(maxDrift*float64(ns-prev.ns)) {
			c.restart(mid, ns)
			return ns
		}
	}
	scale := float64(ns-base.ns) / float64(mid-base.ticks)
	if scale <= 0 || scale > maxScale {
		c.restart(mid, ns)
		return ns
	}
	c.cur.Store(&anchor{
		ticks: mid, ns: ns, scale: scale,
		mult: uint64(scale * (1 << 32)), limit: int64(float64(reanchorEvery) / scale),
	})
	return ns
}

// restart measures the rate afresh from this reading.
func (c *clock) restart(ticks, ns int64) {
	a := &anchor{ticks: ticks, ns: ns}
	c.base.Store(a)
	c.cur.Store(a)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
