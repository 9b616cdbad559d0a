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

// A bucket is at most 25% wide relative to its lower bound.
func TestBucketWidth(t *testing.T) {
	for i := 1; i < Buckets-1; i++ {
		lo, hi := Bounds(i)
		assert.LessOrEqual(t, float64(hi-lo)/float64(lo), 0.25+1e-9, "bucket %d", i)
	}
}

func TestRecordAllocatesNothing(t *testing.T) {
	var c Counters
	assert.Zero(t, testing.AllocsPerRun(1000, func() { c.Record(12345) }))
}
