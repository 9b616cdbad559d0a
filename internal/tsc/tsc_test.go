package tsc

import (
	"sync"
	"testing"
	"time"
	"unsafe"
)

// fake is a pair of clocks the test moves by hand: the exact one in
// nanoseconds, and a counter that runs at perTick ticks per nanosecond plus
// an offset the test can jump.
type fake struct {
	ns      int64
	perNs   float64
	offset  int64
	reads   int // of the exact clock
	between func()
}

func (f *fake) exact() int64 {
	f.reads++
	if f.between != nil {
		f.between()
	}
	return f.ns
}

func (f *fake) counter() int64 { return int64(float64(f.ns)*f.perNs) + f.offset }

func TestExactUntilCalibrated(t *testing.T) {
	f := &fake{ns: 5e9, perNs: 2.5}
	c := newClock(f.exact, f.counter)
	for f.ns < 5e9+int64(calibrate) {
		if got := c.Now(); got != f.ns {
			t.Fatalf("Now = %d before calibration, want the exact %d", got, f.ns)
		}
		f.ns += int64(time.Millisecond)
	}
	if f.reads == 0 {
		t.Fatal("the exact clock was never read")
	}
}

// calibrated returns a clock on f that extrapolates.
func calibrated(t *testing.T, f *fake) *clock {
	t.Helper()
	c := newClock(f.exact, f.counter)
	c.Now()
	f.ns += int64(calibrate)
	c.Now()
	if c.cur.Load().mult == 0 {
		t.Fatal("not calibrated after the calibration time")
	}
	return c
}

func TestExtrapolates(t *testing.T) {
	f := &fake{ns: 1e9, perNs: 2.5, offset: 12345}
	c := calibrated(t, f)
	reads := f.reads
	for range 10_000 {
		f.ns += 997 // under a microsecond a step: many reads an anchor
		if got := c.Now(); abs(got-f.ns) > 2 {
			t.Fatalf("Now = %d, exact %d", got, f.ns)
		}
	}
	// 10,000 steps of 997 ns is about 10 ms: one or two new anchors.
	if n := f.reads - reads; n > 3 {
		t.Errorf("the exact clock was read %d times in 10,000 reads; want only to re-anchor", n)
	}
}

func TestCounterJumps(t *testing.T) {
	for _, tc := range []struct {
		name string
		jump int64
	}{
		{"forward", 1e12}, // a suspended machine whose counter ran on
		{"back", -1e12},   // moved to a machine whose counter is behind
		// Within an anchor's reach a jump shows until the next anchor.
		{"slightly forward", int64(2 * maxSkew * 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{ns: 1e9, perNs: 3}
			c := calibrated(t, f)
			f.offset += tc.jump
			f.ns += int64(reanchorEvery) + 1
			for range 5_000 {
				f.ns += 5_000
				if got := c.Now(); abs(got-f.ns) > int64(maxSkew) {
					t.Fatalf("Now = %d after a jump of %d ticks; exact %d", got, tc.jump, f.ns)
				}
			}
			if c.cur.Load().mult == 0 {
				t.Error("never calibrated again after the jump")
			}
		})
	}
}

func TestRateChange(t *testing.T) {
	f := &fake{ns: 1e9, perNs: 3}
	c := calibrated(t, f)
	// The counter's rate moves by 0.1% (it should not, on a machine whose
	// kernel keeps time with it): no reading is further off than that rate
	// over one anchor's reach, and the last ones are close again.
	base := f.counter()
	start := f.ns
	f.perNs, f.offset = 0, 0
	counter := func() int64 { return base + int64(float64(f.ns-start)*3.003) }
	c.counter = counter
	for range 100_000 {
		f.ns += 1_000
		if got := c.Now(); abs(got-f.ns) > int64(1e-3*float64(reanchorEvery)) {
			t.Fatalf("Now = %d, %v from the exact %d", got, time.Duration(got-f.ns), f.ns)
		}
	}
	f.ns += 100 * int64(time.Second) // the rate, measured from the base, is the new one again
	c.Now()
	for range 100_000 {
		f.ns += 1_000
		if got := c.Now(); abs(got-f.ns) > int64(time.Microsecond) {
			t.Fatalf("100 s on, Now = %d, %v from the exact %d", got, time.Duration(got-f.ns), f.ns)
		}
	}
}

func TestPreemptedPairIsNotAnAnchor(t *testing.T) {
	f := &fake{ns: 1e9, perNs: 2}
	c := calibrated(t, f)
	before := c.cur.Load()
	f.ns += 2 * int64(reanchorEvery)
	f.between = func() { f.ns += int64(time.Millisecond) } // the exact read takes 1 ms
	got := c.Now()
	if got != f.ns {
		t.Fatalf("Now = %d, want the exact %d", got, f.ns)
	}
	if c.cur.Load() != before {
		t.Error("a pair of counter reads 1 ms apart became the anchor")
	}
}

// TestSystemClock reads this machine's counter, if it has one the kernel
// trusts, against the clock it stands in for: every reading lies between
// exact readings taken before and after it, give or take the skew bound.
func TestSystemClock(t *testing.T) {
	epoch := time.Now()
	exact := func() int64 { return int64(time.Since(epoch)) }
	now := New(exact)
	if !trusted() {
		t.Log("no trusted counter here: New returns the exact clock")
	}
	tol := int64(maxSkew) + int64(maxDrift*float64(reanchorEvery))
	deadline := time.Now().Add(100 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) || n < 1000 {
		lo := exact()
		got := now()
		hi := exact()
		if got < lo-tol || got > hi+tol {
			t.Fatalf("reading %d: %d outside [%d, %d] by more than %v", n, got, lo, hi, time.Duration(tol))
		}
		n++
	}
}

func TestConcurrentReads(t *testing.T) {
	epoch := time.Now()
	exact := func() int64 { return int64(time.Since(epoch)) }
	var c func() int64 // rdtsc
	if !trusted() {
		c = exact // the logic still runs, on a counter of nanoseconds
	}
	clk := newClock(exact, c)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := int64(0)
			for range 20_000 {
				v := clk.Now()
				if v < prev-int64(maxSkew) {
					t.Errorf("went back by %v", time.Duration(prev-v))
					return
				}
				prev = max(prev, v)
			}
		}()
	}
	wg.Wait()
}

var sink int64

// BenchmarkNow compares a reading through the counter with one of the
// exact clock, in the same run.
func BenchmarkNow(b *testing.B) {
	epoch := time.Now()
	exact := func() int64 { return int64(time.Since(epoch)) }
	b.Run("exact", func(b *testing.B) {
		for b.Loop() {
			sink += exact()
		}
	})
	b.Run("tsc", func(b *testing.B) {
		now := New(exact)
		for b.Loop() {
			sink += now()
		}
	})
}

func TestPadded(t *testing.T) {
	if s := unsafe.Sizeof(clock{}); s != 128 {
		t.Errorf("clock is %d bytes, want 128", s)
	}
	if s := unsafe.Sizeof(anchor{}); s != 128 {
		t.Errorf("anchor is %d bytes, want 128", s)
	}
}

// TestReanchorRacesReanchor runs a second reading exactly between the two
// counter reads of a re-anchoring (inside its read of the exact clock), so
// that it re-anchors first: both store a valid anchor, whichever stays, and
// readings after them are off by no more than half the microsecond the
// competitor put between the outer pair's counter reads.
func TestReanchorRacesReanchor(t *testing.T) {
	f := &fake{ns: 1e9, perNs: 2.5}
	c := calibrated(t, f)
	f.ns += 2 * int64(reanchorEvery) // past the anchor's reach: the next read re-anchors
	raced := false
	var inner int64
	f.between = func() {
		if raced {
			return
		}
		raced = true
		f.ns += 1_000 // the competitor comes a microsecond later
		inner = c.Now()
	}
	outer := c.Now()
	f.between = nil
	if !raced {
		t.Fatal("the competitor never ran")
	}
	if inner != f.ns || outer != f.ns {
		t.Fatalf("readings %d (inner) and %d (outer), exact %d", inner, outer, f.ns)
	}
	if c.cur.Load().mult == 0 {
		t.Fatal("no calibrated anchor after two re-anchorings")
	}
	for range 1_000 {
		f.ns += 3_000
		if got := c.Now(); abs(got-f.ns) > 600 { // 500, and what that does to the rate over 3 ms
			t.Fatalf("Now = %d, exact %d", got, f.ns)
		}
	}
}
