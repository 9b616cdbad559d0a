package timing_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// request completes once ready is set and its key is checked.
type request struct {
	operation.Base
	ready *atomic.Bool
}

func newRequest(timeout time.Duration, ready *atomic.Bool) *request {
	r := &request{ready: ready}
	r.Init(r, timeout)
	return r
}

func (r *request) TryComplete() bool {
	if r.ready.Load() {
		return r.ForceComplete()
	}
	return false
}

func (r *request) OnComplete()   {}
func (r *request) OnExpiration() {}

// Quantiles of the time in purgatory, for a dashboard or a log line.
func ExampleHistogram_Quantile() {
	mt := timer.NewMockTimer() // deterministic time for the example
	var times timing.Recorder
	p, _ := purgatory.New[string, *request]("Fetch", purgatory.WithTimer(mt), purgatory.WithoutReaper(),
		purgatory.WithObserver(&times))
	defer p.Shutdown(context.Background())

	var appended atomic.Bool
	for i := range 100 {
		_, _ = p.TryCompleteElseWatch(newRequest(time.Hour, &appended), fmt.Sprint(i))
	}
	appended.Store(true)
	for i := range 100 { // one completes each millisecond
		mt.Advance(time.Millisecond)
		p.CheckAndComplete(fmt.Sprint(i))
	}
	h := times.Snapshot().CompletedEarly
	fmt.Println("count:", h.Count(), "mean:", h.Mean())
	fmt.Println("p50 within a bucket of 50ms:", h.Quantile(0.5) >= 50*time.Millisecond*3/4 && h.Quantile(0.5) <= 50*time.Millisecond*5/4)
	// Output:
	// count: 100 mean: 50.5ms
	// p50 within a bucket of 50ms: true
}

// One Recorder times a purgatory; its snapshot has a histogram for each
// way of completing.
func ExampleRecorder() {
	mt := timer.NewMockTimer()
	var times timing.Recorder
	p, _ := purgatory.New[string, *request]("Produce", purgatory.WithTimer(mt), purgatory.WithoutReaper(),
		purgatory.WithObserver(&times))
	defer p.Shutdown(context.Background())

	var never atomic.Bool // the operations complete by ForceComplete or their timeout
	acked := newRequest(time.Second, &never)
	lost := newRequest(30*time.Millisecond, &never)
	_, _ = p.TryCompleteElseWatch(acked, "orders-0")
	_, _ = p.TryCompleteElseWatch(lost, "orders-1")
	mt.Advance(4 * time.Millisecond)
	acked.ForceComplete()
	mt.Advance(26 * time.Millisecond)

	snap := times.Snapshot()
	for outcome, h := range snap.All() {
		if h.Count() > 0 {
			fmt.Println(outcome, h)
		}
	}
	// Output:
	// early n=1 p50=4ms p99=4ms max=4ms
	// expired n=1 p50=30ms p99=30ms max=30ms
}
