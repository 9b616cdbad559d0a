package purgatoryprom

import (
	"time"

	"github.com/purgatory-go/purgatory/contrib/timing"
)

// Option configures a Collector.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	bounds []time.Duration
}

// WithBuckets sets the upper bounds of the time-in-purgatory histogram's
// buckets; Prometheus adds the +Inf bucket itself. The bounds must be
// positive and strictly increasing, or NewCollector panics. No bounds at
// all leave only +Inf, _count and _sum: the cheapest way to export a mean.
//
// Bounds that are not bounds of timing's histogram give lower
// bounds on the true counts; see the package documentation. Powers of
// two of nanoseconds are always exact, as in DefaultBuckets.
func WithBuckets(bounds ...time.Duration) Option {
	bounds = append([]time.Duration(nil), bounds...) // the caller may reuse its slice
	return optionFunc(func(c *config) { c.bounds = bounds })
}

// AddOption configures what Collector.Add reports of a purgatory.
type AddOption interface{ applyAdd(*source) }

type addOptionFunc func(*source)

func (f addOptionFunc) applyAdd(s *source) { f(s) }

// WithTimes has Add export r's histograms as
// purgatory_time_in_purgatory_seconds, by outcome: r is the
// timing.Recorder given to the purgatory's WithObserver. Without it, the
// purgatory has no histogram series. A nil r is ignored.
func WithTimes(r *timing.Recorder) AddOption {
	return addOptionFunc(func(s *source) { s.times = r })
}

// DefaultBuckets returns the bounds a Collector uses unless told
// otherwise: every power of two of nanoseconds from 2^13 ns (8.192µs) to
// 2^37 ns (about 2m17s). Each is a bound of timing's histogram, so
// the counts are exact. It returns a new slice each time, to extend or
// trim for WithBuckets.
func DefaultBuckets() []time.Duration {
	const lo, hi = 13, 37
	b := make([]time.Duration, 0, hi-lo+1)
	for e := lo; e <= hi; e++ {
		b = append(b, time.Duration(1)<<e)
	}
	return b
}

// buckets turns timing's fine histogram into Prometheus buckets.
type buckets struct {
	bounds []time.Duration
	le     []float64 // bounds in seconds: the keys of the le label
}

func newBuckets(bounds []time.Duration) buckets {
	b := buckets{bounds: bounds, le: make([]float64, len(bounds))}
	for i, d := range bounds {
		if d <= 0 || i > 0 && d <= bounds[i-1] {
			panic("purgatoryprom: bucket bounds must be positive and strictly increasing")
		}
		b.le[i] = d.Seconds()
	}
	return b
}

// cumulative returns, for each bound, how many durations h holds in the
// timing buckets that end at or below it, and h's count. The count is
// summed from the same buckets rather than read with Count, so that the
// +Inf bucket always agrees with the others.
func (b *buckets) cumulative(h *timing.Histogram) (map[float64]uint64, uint64) {
	cum := make(map[float64]uint64, len(b.bounds))
	var total uint64
	j := 0
	for hi, n := range h.Buckets() {
		// A bound below hi ends inside this timing bucket (or before
		// it): it gets the buckets before this one, and no share of this
		// one, since how its durations spread is unknown.
		for ; j < len(b.bounds) && b.bounds[j] < hi; j++ {
			cum[b.le[j]] = total
		}
		total += n
	}
	for ; j < len(b.bounds); j++ {
		cum[b.le[j]] = total
	}
	return cum, total
}
