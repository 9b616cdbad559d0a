package core

import (
	"math"
	"math/rand/v2"
	"testing"
)

// divisor agrees with Go's division for divisors of every size, the
// wheel's own among them, and dividends at the edges and at random.
func TestDivisorMatchesDivision(t *testing.T) {
	ds := []int64{1, 2, 3, 5, 7, 10, 20, 40, 400, 641, 1000, 8000, 1e6, 2e7, 4e8, 1e9,
		1<<31 - 1, 1 << 32, 1<<32 + 1, 6700417, 1<<62 - 57, 1 << 62, math.MaxInt64 - 1, math.MaxInt64}
	for n := int64(20); n < math.MaxInt64/20; n *= 20 {
		ds = append(ds, n, 2*n)
		if n < math.MaxInt64/1_000_000 {
			ds = append(ds, n*1_000_000) // a level's tick in nanoseconds
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		ds = append(ds, r.Int64N(math.MaxInt64)+1, r.Int64N(1<<20)+1)
	}
	for _, d := range ds {
		v := newDivisor(d)
		xs := []int64{0, 1, d - 1, d, d + 1, 2*d - 1, math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - d, -1, -d, math.MinInt64}
		for range 200 {
			xs = append(xs, r.Int64N(math.MaxInt64), r.Int64N(1<<40), r.Int64N(d)*r.Int64N(d))
		}
		for _, x := range xs {
			if got, want := v.div(x), x/d; got != want {
				t.Fatalf("%d / %d = %d, want %d", x, d, got, want)
			}
			if got, want := v.mod(x), x%d; got != want {
				t.Fatalf("%d %% %d = %d, want %d", x, d, got, want)
			}
		}
	}
}

func FuzzDivisor(f *testing.F) {
	f.Add(int64(1<<62), int64(20))
	f.Add(int64(math.MaxInt64), int64(1e6))
	f.Fuzz(func(t *testing.T, x, d int64) {
		if d <= 0 {
			return
		}
		v := newDivisor(d)
		if got, want := v.div(x), x/d; got != want {
			t.Fatalf("%d / %d = %d, want %d", x, d, got, want)
		}
	})
}

func TestDivisorRefusesNonPositive(t *testing.T) {
	for _, d := range []int64{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("newDivisor(%d) did not panic", d)
				}
			}()
			newDivisor(d)
		}()
	}
}
