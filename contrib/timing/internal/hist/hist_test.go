package hist

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Every duration falls in the bucket whose bounds hold it, and the buckets
// tile the line without gaps.
func TestIndexMatchesBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		d := int64(r.Uint64N(1 << 46))
		if r.IntN(2) == 0 {
			d >>= r.IntN(40)
		}
		i := Index(d)
		lo, hi := Bounds(i)
		if time.Duration(d) < lo || time.Duration(d) >= hi {
			t.Fatalf("%d ns in bucket %d = [%d, %d)", d, i, lo, hi)
		}
	}
	for i := 0; i < Buckets-1; i++ {
		_, hi := Bounds(i)
		lo, _ := Bounds(i + 1)
		assert.Equal(t, hi, lo, "gap after bucket %d", i)
	}
	assert.Equal(t, 0, Index(-5))
	assert.Equal(t, Buckets-1, Index(1<<62))
}

// A bucket is at most 12.5% wide relative to its lower bound.
func TestBucketWidth(t *testing.T) {
	for i := 1; i < Buckets-1; i++ {
		lo, hi := Bounds(i)
		assert.LessOrEqual(t, float64(hi-lo)/float64(lo), 0.125+1e-9, "bucket %d", i)
	}
}

func TestRecordAllocatesNothing(t *testing.T) {
	var c Counters
	assert.Zero(t, testing.AllocsPerRun(1000, func() { c.Record(12345) }))
}

// Min and max follow every record, whatever the order.
func TestExtremes(t *testing.T) {
	var c Counters
	var s Snapshot
	c.AddTo(&s)
	assert.Zero(t, s.Lo)
	for _, d := range []int64{50_000, 7_400, 900_600, 0, 12_000} {
		c.Record(d)
	}
	s = Snapshot{}
	c.AddTo(&s)
	assert.Equal(t, int64(0+1), s.Lo)
	assert.Equal(t, int64(900_600+1), s.Hi)
	var o Counters
	o.Record(5_000_000)
	var t2 Snapshot
	o.AddTo(&t2)
	s.Add(&t2)
	assert.Equal(t, int64(1), s.Lo)
	assert.Equal(t, int64(5_000_001), s.Hi)
	assert.Equal(t, uint64(50+7+901+12+5000), s.SumUs, "microseconds, each rounded")
}
