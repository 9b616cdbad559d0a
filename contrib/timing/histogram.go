package timing

import (
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"time"

	"github.com/purgatory-go/purgatory/contrib/timing/internal/hist"
)

// Histogram is a snapshot of how long operations stayed in a purgatory,
// in fixed log-scale buckets: one below 1µs, then eight per power of two
// up to about 4.9 hours, and one above; it also keeps the smallest and
// largest duration recorded. A bucket is at most 12.5% wider than its lower
// bound, and a quantile read off the histogram lies in the same bucket as
// the true one, and between Min and Max. Histograms of any purgatories merge. The zero value is empty.
type Histogram struct {
	s hist.Snapshot
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.s.Counts {
		n += c
	}
	return n
}

// Sum returns the total of the durations recorded, each rounded to the
// microsecond. It saturates at the largest Duration, 292 years; SumSeconds
// does not.
func (h *Histogram) Sum() time.Duration {
	if h.s.SumUs > math.MaxInt64/1000 {
		return math.MaxInt64
	}
	return time.Duration(h.s.SumUs * 1000)
}

// SumSeconds returns the total of the durations recorded, in seconds, as
// Prometheus and other exporters want it. The total is kept in
// microseconds and lasts 584,000 years of summed time.
func (h *Histogram) SumSeconds() float64 { return float64(h.s.SumUs) / 1e6 }

// Min returns the shortest duration recorded, or zero when h is empty.
func (h *Histogram) Min() time.Duration { return time.Duration(max(h.s.Lo-1, 0)) }

// Max returns the longest duration recorded, or zero when h is empty.
func (h *Histogram) Max() time.Duration { return time.Duration(max(h.s.Hi-1, 0)) }

// Mean returns the average duration, or zero when h is empty.
func (h *Histogram) Mean() time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	return time.Duration(h.s.SumUs / n * 1000)
}

// Quantile returns an estimate of the q-quantile (0 <= q <= 1) of the
// durations recorded: in the bucket holding it, where the bucket's count
// is taken as spread evenly (a lone duration reads as the bucket's middle),
// and never below Min or above Max. It returns zero for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := max(math.Ceil(q*float64(n)), 1) // the rank-th smallest, from 1
	var seen float64
	for i, c := range h.s.Counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := hist.Bounds(i)
			lo, hi = max(lo, h.Min()), min(hi, h.Max())
			frac := (rank - seen - 0.5) / float64(c)
			return min(max(lo+time.Duration(frac*float64(hi-lo)), lo), hi)
		}
		seen += float64(c)
	}
	return h.Max() // not reached
}

// Merge adds o to h.
func (h *Histogram) Merge(o *Histogram) { h.s.Add(&o.s) }

// Buckets yields each bucket's upper bound and the number of durations in
// it, in increasing order. A bucket holds durations from the previous
// bound up to but not including its own (Prometheus's le bounds include
// theirs: a duration exactly on a bound counts in the next bucket here);
// the last bucket's bound is math.MaxInt64. It is for exporting to other
// metrics systems (contrib/prometheus uses it).
func (h *Histogram) Buckets() iter.Seq2[time.Duration, uint64] {
	return func(yield func(time.Duration, uint64) bool) {
		for i, c := range h.s.Counts {
			if _, hi := hist.Bounds(i); !yield(hi, c) {
				return
			}
		}
	}
}

// String summarises h: count, median, 99th percentile and maximum.
func (h Histogram) String() string {
	n := h.Count()
	if n == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", n, round(h.Quantile(0.5)),
		round(h.Quantile(0.99)), round(h.Max()))
}

// round keeps three significant figures, for printing.
func round(d time.Duration) time.Duration {
	for u := time.Duration(1); u < time.Hour; u *= 10 {
		if d < 1000*u {
			return d.Round(u)
		}
	}
	return d.Round(time.Second)
}

// MarshalJSON writes a summary of h: count, sum (in microseconds), and in
// nanoseconds mean, min, the 50th, 90th, 99th and 99.9th percentiles, and
// max: what encoding/json, and so expvar, shows of a Stats.
func (h Histogram) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Count uint64 `json:"count"`
		Sum   uint64 `json:"sum_us"`
		Mean  int64  `json:"mean_ns"`
		Min   int64  `json:"min_ns"`
		P50   int64  `json:"p50_ns"`
		P90   int64  `json:"p90_ns"`
		P99   int64  `json:"p99_ns"`
		P999  int64  `json:"p999_ns"`
		Max   int64  `json:"max_ns"`
	}{h.Count(), h.s.SumUs, int64(h.Mean()), int64(h.Min()), int64(h.Quantile(0.5)), int64(h.Quantile(0.9)),
		int64(h.Quantile(0.99)), int64(h.Quantile(0.999)), int64(h.Max())})
}
