package core

import "math/bits"

// divisor divides by a fixed positive number with a multiplication and a
// shift instead of a division instruction, which costs 40-90 cycles on
// amd64: every Add divides a deadline by the tick and a tick by a level's
// tick and its number of buckets. It is the round-up method of Granlund
// and Montgomery ("Division by invariant integers using multiplication",
// 1994), in the form libdivide gives it.
type divisor struct {
	d     int64
	magic uint64 // 0 when d is a power of two
	shift uint8
	add   bool // magic needs a 65th bit: the quotient takes one more step
}

func newDivisor(d int64) divisor {
	if d <= 0 {
		panic("timer: divisor must be positive")
	}
	u := uint64(d)
	l := uint8(63 - bits.LeadingZeros64(u)) // 2^l <= d < 2^(l+1)
	v := divisor{d: d, shift: l}
	if u&(u-1) == 0 {
		return v
	}
	// m = 2^(64+l) / d; the dividend's high word 2^l is below d, as
	// bits.Div64 requires.
	m, rem := bits.Div64(1<<l, 0, u)
	if u-rem < 1<<l {
		v.magic = m + 1
		return v
	}
	m += m
	if twice := rem + rem; twice >= u || twice < rem {
		m++
	}
	v.magic, v.add = m+1, true
	return v
}

// div returns x / d, rounded toward zero as Go's division is.
func (v *divisor) div(x int64) int64 {
	if x < 0 {
		return x / v.d // not on any hot path: deadlines are not negative
	}
	u := uint64(x)
	if v.magic == 0 {
		return int64(u >> v.shift)
	}
	q, _ := bits.Mul64(v.magic, u)
	if v.add {
		q += (u - q) >> 1
	}
	return int64(q >> v.shift)
}

// mod returns x % d.
func (v *divisor) mod(x int64) int64 { return x - v.div(x)*v.d }
