package timing_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/purgatory/timing"
	"github.com/purgatory-go/purgatory/timer"
)

// Quantiles of the time in purgatory, for a dashboard or a log line.
func ExampleHistogram_Quantile() {
	mt := timer.NewMockTimer() // deterministic time for the example
	var times timing.Recorder
	p, _ := purgatory.New[string, *operation.Func]("Fetch", purgatory.WithTimer(mt), purgatory.WithoutReaper(),
		purgatory.WithObserver(&times))
	defer p.Shutdown(context.Background())

	var appended atomic.Bool
	for i := range 100 {
		f := operation.NewFunc(time.Hour, appended.Load, func(error) {})
		_, _ = p.TryCompleteElseWatch(f, fmt.Sprint(i))
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
	p, _ := purgatory.New[string, *operation.Func]("Produce", purgatory.WithTimer(mt), purgatory.WithoutReaper(),
		purgatory.WithObserver(&times))
	defer p.Shutdown(context.Background())

	never := func() bool { return false }
	acked := operation.NewFunc(time.Second, never, func(error) {})
	lost := operation.NewFunc(30*time.Millisecond, never, func(error) {})
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
