// Package purgatoryotel reports purgatories (package
// github.com/purgatory-go/purgatory/purgatory) to OpenTelemetry: a span
// for each parked operation, under its request's span, and metrics with
// the names and meaning of contrib/prometheus's.
//
// # Usage
//
// Make one [Observer] per purgatory, install it, and register the
// purgatory's Stats once it is made:
//
//	obs, err := purgatoryotel.New("Produce")
//	...
//	produce, err := purgatory.New[K, T]("Produce", purgatory.WithObserver(obs))
//	...
//	reg, err := obs.RegisterStats(produce)
//	defer reg.Unregister()
//
// and give each operation its request's context:
//
//	op.Init(op, timeout, operation.WithContext(ctx))
//
// # Spans
//
// An operation whose context carries a sampled span gets a child span,
// purgatory.wait, from its park to its completion, with the attributes
// purgatory.name, purgatory.keys, and at the end purgatory.outcome (early,
// expired, context, shutdown, for_key or cancelled) and purgatory.tries.
// Its status is Error for an expiry, a shutdown, and a CompleteForKey with
// a cause; unset otherwise. A refused operation adds the event
// purgatory.refused to its context's span.
//
// Sampling follows the parent: an operation whose context carries a span
// that is not sampled costs a lookup of that span and no span work, and
// one whose context carries no span is not traced unless [WithRootSpans]
// is given (then the TracerProvider's sampler decides).
//
// # Metrics
//
// All carry the attribute purgatory.name; the histogram also
// purgatory.outcome. Through a Prometheus exporter they come out under
// contrib/prometheus's names.
//
//	purgatory.size                 up-down counter  {entry}      Stats.Watched    Kafka's PurgatorySize
//	purgatory.delayed_operations   up-down counter  {operation}  Stats.Pending    Kafka's NumDelayedOperations
//	purgatory.expires              counter          {operation}  Stats.Expired    Kafka's ExpiresPerSec
//	purgatory.completed_early      counter          {operation}  Stats.CompletedEarly
//	purgatory.context_done         counter          {operation}  Stats.ContextDone
//	purgatory.expired_by_shutdown  counter          {operation}  Stats.Shutdown
//	purgatory.completed_for_key    counter          {operation}  Stats.CompletedForKey
//	purgatory.cancelled            counter          {operation}  Stats.Cancelled
//	purgatory.purged               counter          {entry}      Stats.Purged
//	purgatory.panics               counter          {panic}      Stats.Panics
//	purgatory.full                 counter          {operation}  Stats.Full
//	purgatory.time_in_purgatory    histogram        s            by outcome, cancelled operations not timed
//
// The gauges and counters are read from Stats at each collection
// ([Observer.RegisterStats]); the histogram is recorded at each
// departure, whether or not the operation is traced.
//
// # Cost
//
// The callbacks run on the goroutine that parks or completes the
// operation, the reaper's for an expiry: they never block. Benchmarks
// in this module (BenchmarkObserverCost) give each observer's CPU per
// request of Kafka's performance workload C against no observer in the
// same run; docs/observing.md has the figures.
package purgatoryotel
