// Package purgatoryprom exports the Stats of one or more purgatories
// (package github.com/purgatory-go/purgatory/purgatory) as Prometheus
// metrics, under the names Kafka gives the same figures where it has them.
//
// The package is named purgatoryprom rather than after its directory:
// every program that uses it also imports
// github.com/prometheus/client_golang/prometheus for a registry, and two
// packages both called prometheus would force one of them to be renamed at
// every import.
//
// # Usage
//
// Create one [Collector], add each purgatory under the name its metrics
// are labelled with, and register the collector. The time-in-purgatory
// histograms come from a timing.Recorder (package
// github.com/purgatory-go/purgatory/contrib/timing) installed on the
// purgatory as its observer, and handed to Add with [WithTimes]:
//
//	var produceTimes timing.Recorder
//	produce, err := purgatory.New[K, T]("Produce", purgatory.WithObserver(&produceTimes))
//	...
//	c := purgatoryprom.NewCollector()
//	if err := c.Add("Produce", produce, purgatoryprom.WithTimes(&produceTimes)); err != nil { ... }
//	if err := c.Add("Fetch", fetch); err != nil { ... } // counters and gauges only
//	prometheus.MustRegister(c)
//
// Purgatories may be added and removed at any time, before or after
// registration; a scrape reports those added at that moment. Remove a
// purgatory before dropping it, or its last figures stay exported for as
// long as the collector lives (Stats still works after Shutdown).
//
// The metrics' descriptors do not depend on which purgatories are added,
// so one collector serves any number of them, and a registry accepts only
// one collector: a second one fails to register as a duplicate. To tell
// brokers or processes apart, or to prefix the names, wrap the registerer
// (prometheus.WrapRegistererWith, prometheus.WrapRegistererWithPrefix).
//
// # Metrics
//
// Every metric has the label purgatory, the name given to Add (Kafka's
// delayedOperation tag). Each scrape calls Stats once per purgatory.
//
//	purgatory_size                       gauge      Stats.Watched    Kafka's PurgatorySize
//	purgatory_delayed_operations         gauge      Stats.Pending    Kafka's NumDelayedOperations
//	purgatory_expires_total              counter    Stats.Expired    Kafka's ExpiresPerSec (a meter there)
//	purgatory_completed_early_total      counter    Stats.CompletedEarly
//	purgatory_context_done_total         counter    Stats.ContextDone
//	purgatory_expired_by_shutdown_total  counter    Stats.Shutdown
//	purgatory_cancelled_total            counter    Stats.Cancelled
//	purgatory_purged_total               counter    Stats.Purged
//	purgatory_panics_total               counter    Stats.Panics
//	purgatory_full_total                 counter    Stats.Full
//	purgatory_time_in_purgatory_seconds  histogram  timing.Recorder's Snapshot, label outcome
//
// The histogram's outcome label is early, expired, context, shutdown or
// for_key, one for each of timing.TimeInPurgatory's histograms. Cancelled
// operations are not timed. A purgatory added without WithTimes has no
// histogram series; the Recorder costs a clock read at each park and
// completion, which a purgatory without an observer does not make.
//
// # Histogram buckets
//
// A timing.Recorder records time in purgatory in 274 fine buckets, eight
// per power of two of nanoseconds. Exporting them all would cost 276
// series per purgatory and outcome, so the collector sums them into
// coarser Prometheus buckets. By default the bounds are the powers of two
// from 2^13 ns (8.192µs) to 2^37 ns (about 137s), 25 of them; each is a
// bound of timing's buckets, so every count is exact. [WithBuckets]
// sets other bounds.
//
// A timing bucket holds durations d with lo <= d < hi, and a Prometheus
// bucket counts a timing bucket only if the timing bucket ends at or
// below its bound. Two consequences:
//
//   - A bound that is not one of timing's (a round 1ms, say) counts
//     only the timing buckets that end below it: its count is a lower
//     bound, short by the durations between the timing bound below it and
//     itself. Timing's bounds are the powers of two of nanoseconds
//     from 2^10 (1.024µs) to 2^44 (about 4.9 hours), and 1.125, 1.25, ...
//     1.875 times each of them but the last.
//   - A duration exactly equal to a bound counts in the bucket above it,
//     not in the bucket whose le is that bound as Prometheus would have
//     it. With nanosecond durations this is rarely visible outside tests.
//
// The _sum is timing.Histogram.SumSeconds: timing keeps the sum in
// microseconds, each duration rounded, which lasts 584,000 years of
// accumulated time in purgatory (58 years of 20,000 fetches a second each
// waiting 500ms).
//
// # Concurrency
//
// A Collector is safe for concurrent use by multiple goroutines: scrapes
// may overlap each other and calls to Add and Remove.
package purgatoryprom
