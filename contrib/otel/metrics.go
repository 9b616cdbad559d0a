package purgatoryotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/purgatory-go/purgatory/purgatory"
)

// gauge is one of the Stats figures and its instrument.
type gauge struct {
	name, unit, desc string
	get              func(*purgatory.Stats) int64
}

// counter is one of the Stats counters and its instrument.
type counter struct {
	name, unit, desc string
	get              func(*purgatory.Stats) uint64
}

// The names are contrib/prometheus's, as OpenTelemetry spells them: a
// Prometheus exporter turns purgatory.expires, a counter, back into
// purgatory_expires_total, and purgatory.size into purgatory_size.
var (
	gauges = []gauge{
		{"purgatory.size", "{entry}",
			"Watch entries of pending operations, one for each key an operation watches (Kafka's PurgatorySize).",
			func(s *purgatory.Stats) int64 { return int64(s.Watched) }},
		{"purgatory.delayed_operations", "{operation}",
			"Operations parked and not yet completed or cancelled (Kafka's NumDelayedOperations).",
			func(s *purgatory.Stats) int64 { return int64(s.Pending) }},
	}
	counters = []counter{
		{"purgatory.expires", "{operation}",
			"Operations completed by their timeout (Kafka's ExpiresPerSec).",
			func(s *purgatory.Stats) uint64 { return s.Expired }},
		{"purgatory.completed_early", "{operation}",
			"Operations completed before their timeout by TryComplete or ForceComplete.",
			func(s *purgatory.Stats) uint64 { return s.CompletedEarly }},
		{"purgatory.context_done", "{operation}",
			"Operations completed because the context given to operation.WithContext ended.",
			func(s *purgatory.Stats) uint64 { return s.ContextDone }},
		{"purgatory.expired_by_shutdown", "{operation}",
			"Pending operations expired by Shutdown.",
			func(s *purgatory.Stats) uint64 { return s.Shutdown }},
		{"purgatory.completed_for_key", "{operation}",
			"Operations completed by CompleteForKey or Complete, with the cause it was given.",
			func(s *purgatory.Stats) uint64 { return s.CompletedForKey }},
		{"purgatory.cancelled", "{operation}",
			"Operations taken out by CancelForKey, with no callback run.",
			func(s *purgatory.Stats) uint64 { return s.Cancelled }},
		{"purgatory.purged", "{entry}",
			"Watch entries of completed operations removed by the purge (Kafka's purgeCompleted).",
			func(s *purgatory.Stats) uint64 { return s.Purged }},
		{"purgatory.panics", "{panic}",
			"Panics recovered in operations' callbacks, observers and expiry.",
			func(s *purgatory.Stats) uint64 { return s.Panics }},
		{"purgatory.full", "{operation}",
			"Operations refused with ErrFull because WithMaxPending operations were pending.",
			func(s *purgatory.Stats) uint64 { return s.Full }},
	}
)

// RegisterStats reports s's Stats, with the attribute purgatory.name,
// through the Observer's meter: purgatory.size and
// purgatory.delayed_operations as up-down counters, and the counters as
// counters, each read once per collection with one call of Stats.
// Unregister the returned Registration before dropping s. It returns
// ErrNilSource for a nil s, and the meter's error if it refuses an
// instrument.
func (o *Observer) RegisterStats(s Source) (metric.Registration, error) {
	if s == nil {
		return nil, ErrNilSource
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(o.name))
	var insts []metric.Observable
	gs := make([]metric.Int64ObservableUpDownCounter, len(gauges))
	for i, g := range gauges {
		inst, err := o.meter.Int64ObservableUpDownCounter(g.name, metric.WithUnit(g.unit), metric.WithDescription(g.desc))
		if err != nil {
			return nil, err
		}
		gs[i] = inst
		insts = append(insts, inst)
	}
	cs := make([]metric.Int64ObservableCounter, len(counters))
	for i, c := range counters {
		inst, err := o.meter.Int64ObservableCounter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.desc))
		if err != nil {
			return nil, err
		}
		cs[i] = inst
		insts = append(insts, inst)
	}
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		st := s.Stats()
		for i, g := range gauges {
			obs.ObserveInt64(gs[i], g.get(&st), attrs)
		}
		for i, c := range counters {
			obs.ObserveInt64(cs[i], int64(c.get(&st)), attrs)
		}
		return nil
	}, insts...)
}
