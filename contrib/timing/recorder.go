package timing

import (
	"iter"

	"github.com/purgatory-go/purgatory/contrib/timing/internal/hist"
	"github.com/purgatory-go/purgatory/purgatory"
)

// Recorder is a purgatory.Observer that records how long each operation
// stays parked, in one Histogram for each way of completing. Install it
// on one purgatory or several (their times add up) and read it with
// Snapshot:
//
//	var times timing.Recorder
//	p, err := purgatory.New[K, T]("Produce", purgatory.WithObserver(&times))
//	...
//	fmt.Println(times.Snapshot().Expired.Quantile(0.99))
//
// Cancelled operations are not timed. Recording keeps no state per
// operation and allocates nothing: two atomic adds and two loads on one
// of a few stripes, chosen by the duration's low bits so that
// completions on different cores seldom share one.
//
// The zero Recorder is empty and ready for use. It must not be copied
// after first use. A Recorder is safe for concurrent use by multiple
// goroutines; Snapshot may run while operations are recorded.
type Recorder struct {
	// hists are about 2 KiB each.
	hists [stripes][completions]hist.Counters
}

const (
	stripes     = 4
	completions = int(purgatory.OutcomeForKey) + 1 // every outcome but cancelled
)

var _ purgatory.Observer = (*Recorder)(nil)

// Parked keeps nothing: the purgatory measures the stay.
func (r *Recorder) Parked(purgatory.Park) any { return nil }

// Left records d.Time under d.Outcome.
func (r *Recorder) Left(_ any, d purgatory.Departure) {
	if int(d.Outcome) >= completions {
		return
	}
	r.hists[(uint64(d.Time)>>6)%stripes][d.Outcome].Record(int64(d.Time))
}

// Refused records nothing.
func (r *Recorder) Refused(purgatory.Park, error) {}

// Snapshot returns what r has recorded so far.
func (r *Recorder) Snapshot() TimeInPurgatory {
	var t TimeInPurgatory
	for k, h := range t.byOutcome() {
		for i := range r.hists {
			r.hists[i][k].AddTo(&h.s)
		}
	}
	return t
}

// byOutcome yields t's histograms indexed by purgatory.Outcome.
func (t *TimeInPurgatory) byOutcome() iter.Seq2[purgatory.Outcome, *Histogram] {
	return func(yield func(purgatory.Outcome, *Histogram) bool) {
		_ = yield(purgatory.OutcomeEarly, &t.CompletedEarly) && yield(purgatory.OutcomeExpired, &t.Expired) &&
			yield(purgatory.OutcomeContext, &t.ContextDone) && yield(purgatory.OutcomeShutdown, &t.Shutdown) &&
			yield(purgatory.OutcomeForKey, &t.CompletedForKey)
	}
}

// TimeInPurgatory holds how long operations were parked before they
// completed, from TryCompleteElseWatch to the completion, one histogram for
// each way of completing, named as purgatory.Stats names the counts. Operations
// completed by TryCompleteElseWatch's own TryComplete count in
// CompletedEarly with the time that call took. Within one histogram the
// count and the sum are read apart, so while operations complete they may
// be one duration apart.
type TimeInPurgatory struct {
	CompletedEarly  Histogram // by TryComplete or ForceComplete
	Expired         Histogram // by their timeout
	ContextDone     Histogram // by their context
	Shutdown        Histogram // by Shutdown
	CompletedForKey Histogram // by CompleteForKey
}

// All yields each histogram with a short name for its outcome: "early",
// "expired", "context", "shutdown" and "for_key", in that order (the
// outcomes' String). Exporters use it to label them, and so see a
// histogram added later without a change.
func (t *TimeInPurgatory) All() iter.Seq2[string, *Histogram] {
	return func(yield func(string, *Histogram) bool) {
		for k, h := range t.byOutcome() {
			if !yield(k.String(), h) {
				return
			}
		}
	}
}

// Merged returns the histograms merged into one.
func (t *TimeInPurgatory) Merged() Histogram {
	var h Histogram
	for _, x := range t.All() {
		h.Merge(x)
	}
	return h
}
