package purgatoryprom_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	purgatoryprom "github.com/purgatory-go/purgatory/contrib/prometheus"
	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// delayedProduce waits until its replicas have acknowledged it.
type delayedProduce struct {
	operation.Base
	acks   atomic.Int32 // set as replicas acknowledge
	needed int32
}

func (p *delayedProduce) TryComplete() bool {
	if p.acks.Load() >= p.needed {
		return p.ForceComplete()
	}
	return false
}

func (p *delayedProduce) OnComplete()   {}
func (p *delayedProduce) OnExpiration() {}

// Registering the collector, and what a scrape of it holds.
func Example() {
	mt := timer.NewMockTimer() // deterministic time for the example
	var times timing.Recorder  // the time-in-purgatory histograms
	produce, err := purgatory.New[string, *delayedProduce]("Produce",
		purgatory.WithTimer(mt), purgatory.WithoutReaper(), purgatory.WithObserver(&times))
	if err != nil {
		panic(err)
	}
	defer produce.Shutdown(context.Background())

	c := purgatoryprom.NewCollector()
	if err := c.Add("Produce", produce, purgatoryprom.WithTimes(&times)); err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	// Three produces wait for two replicas each, with a 30ms timeout.
	var ops []*delayedProduce
	for range 3 {
		op := &delayedProduce{needed: 2}
		op.Init(op, 30*time.Millisecond)
		if _, err := produce.TryCompleteElseWatch(op, "orders-0"); err != nil {
			panic(err)
		}
		ops = append(ops, op)
	}
	// After 3ms the first two have their acknowledgements.
	mt.Advance(3 * time.Millisecond)
	ops[0].acks.Store(2)
	ops[1].acks.Store(2)
	produce.CheckAndComplete("orders-0")
	// The third times out at 30ms.
	mt.Advance(27 * time.Millisecond)

	// A server would serve this handler at /metrics; here we scrape it once.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		for _, prefix := range []string{
			"purgatory_delayed_operations{",
			"purgatory_completed_early_total{",
			"# HELP purgatory_expires_total",
			"purgatory_expires_total{",
			`purgatory_time_in_purgatory_seconds_sum{outcome="early"`,
			`purgatory_time_in_purgatory_seconds_count{outcome="early"`,
			`purgatory_time_in_purgatory_seconds_bucket{outcome="expired",purgatory="Produce",le="0.033554432"}`,
		} {
			if strings.HasPrefix(line, prefix) {
				fmt.Print(line)
			}
		}
	}
	// Output:
	// purgatory_completed_early_total{purgatory="Produce"} 2
	// purgatory_delayed_operations{purgatory="Produce"} 0
	// # HELP purgatory_expires_total Operations completed by their timeout (Kafka's ExpiresPerSec, here a counter).
	// purgatory_expires_total{purgatory="Produce"} 1
	// purgatory_time_in_purgatory_seconds_sum{outcome="early",purgatory="Produce"} 0.006
	// purgatory_time_in_purgatory_seconds_count{outcome="early",purgatory="Produce"} 2
	// purgatory_time_in_purgatory_seconds_bucket{outcome="expired",purgatory="Produce",le="0.033554432"} 1
}
