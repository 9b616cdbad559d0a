package purgatoryprom

import (
	"errors"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/purgatory"
)

// Errors returned by Add. Check them with [errors.Is].
var (
	// ErrDuplicateName is returned by Add for a name already added.
	ErrDuplicateName = errors.New("purgatoryprom: a purgatory of that name is already added")
	// ErrInvalidName is returned by Add for an empty name or one that is
	// not valid UTF-8. Prometheus treats an empty label value as no label,
	// and refuses invalid UTF-8 at scrape time; refusing both at Add keeps
	// scrapes from failing later.
	ErrInvalidName = errors.New("purgatoryprom: purgatory name must be non-empty valid UTF-8")
	// ErrNilSource is returned by Add for a nil Source.
	ErrNilSource = errors.New("purgatoryprom: nil source")
)

// Source is what the collector reads: a *purgatory.Purgatory[K, T] of any
// K and T, or anything else that reports Stats. A Purgatory is generic, so
// the collector takes this interface rather than a concrete type.
type Source interface {
	Stats() purgatory.Stats
}

// Collector is a prometheus.Collector for the Stats of the purgatories
// added to it. Create it with NewCollector.
//
// A Collector is safe for concurrent use by multiple goroutines.
type Collector struct {
	// Set by NewCollector, then only read.
	size, delayed   *prometheus.Desc
	counters        []counter
	timeInPurgatory *prometheus.Desc
	buckets         buckets

	mu      sync.RWMutex
	sources map[string]source // guarded by mu; nil until NewCollector
}

// source is a purgatory added, and the Recorder that times it, if any.
type source struct {
	stats Source
	times *timing.Recorder
}

// counter is one of the Stats counters and how to read it.
type counter struct {
	desc *prometheus.Desc
	get  func(*purgatory.Stats) uint64
}

// NewCollector returns a Collector with no purgatories. It panics if an
// option is invalid (see WithBuckets), as prometheus.NewHistogram does for
// bad buckets: bounds are written into the program, so a bad one is a bug
// to catch at start-up, not an error to handle.
func NewCollector(opts ...Option) *Collector {
	cfg := config{bounds: DefaultBuckets()}
	for _, o := range opts {
		o.apply(&cfg)
	}
	b := newBuckets(cfg.bounds)
	label := []string{"purgatory"}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, label, nil)
	}
	c := &Collector{
		size: desc("purgatory_size",
			"Watch entries of pending operations, one for each key an operation watches "+
				"(Kafka's PurgatorySize; Kafka's also counts completed operations until a purge)."),
		delayed: desc("purgatory_delayed_operations",
			"Operations parked and not yet completed or cancelled (Kafka's NumDelayedOperations)."),
		timeInPurgatory: prometheus.NewDesc("purgatory_time_in_purgatory_seconds",
			"Time operations spent parked, from TryCompleteElseWatch to completion, "+
				"by outcome: early, expired, context, shutdown or for_key "+
				"(the purgatory's share of Kafka's request metric RemoteTimeMs).",
			[]string{"purgatory", "outcome"}, nil),
		buckets: b,
		sources: make(map[string]source),
	}
	c.counters = []counter{
		{desc("purgatory_expires_total",
			"Operations completed by their timeout (Kafka's ExpiresPerSec, here a counter)."),
			func(s *purgatory.Stats) uint64 { return s.Expired }},
		{desc("purgatory_completed_early_total",
			"Operations completed before their timeout by TryComplete or ForceComplete, "+
				"including those TryCompleteElseWatch completed without parking."),
			func(s *purgatory.Stats) uint64 { return s.CompletedEarly }},
		{desc("purgatory_context_done_total",
			"Operations completed because the context given to operation.WithContext ended."),
			func(s *purgatory.Stats) uint64 { return s.ContextDone }},
		{desc("purgatory_expired_by_shutdown_total",
			"Pending operations expired by Shutdown."),
			func(s *purgatory.Stats) uint64 { return s.Shutdown }},
		{desc("purgatory_completed_for_key_total",
			"Operations completed by CompleteForKey or Complete, with the cause it was given."),
			func(s *purgatory.Stats) uint64 { return s.CompletedForKey }},
		{desc("purgatory_cancelled_total",
			"Operations taken out by CancelForKey, with no callback run."),
			func(s *purgatory.Stats) uint64 { return s.Cancelled }},
		{desc("purgatory_purged_total",
			"Watch entries of completed operations removed by the purge (Kafka's purgeCompleted)."),
			func(s *purgatory.Stats) uint64 { return s.Purged }},
		{desc("purgatory_panics_total",
			"Panics recovered in operations' callbacks and in expiry."),
			func(s *purgatory.Stats) uint64 { return s.Panics }},
		{desc("purgatory_full_total",
			"Operations refused with ErrFull because WithMaxPending operations were pending."),
			func(s *purgatory.Stats) uint64 { return s.Full }},
	}
	return c
}

// Add makes the collector report s, labelled purgatory=name, from the next
// scrape on: its Stats, and with WithTimes its time in purgatory. It
// returns ErrDuplicateName if name is already added, ErrInvalidName if it
// is empty or not valid UTF-8, and ErrNilSource for a nil s; then nothing
// changes.
func (c *Collector) Add(name string, s Source, opts ...AddOption) error {
	c.mustBeMade()
	src := source{stats: s}
	for _, o := range opts {
		o.applyAdd(&src)
	}
	switch {
	case name == "" || !utf8.ValidString(name):
		return ErrInvalidName
	case s == nil:
		return ErrNilSource
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sources[name]; ok {
		return ErrDuplicateName
	}
	c.sources[name] = src
	return nil
}

// Remove stops reporting the purgatory added as name, and reports whether
// there was one. Its series disappear from the next scrape; a scrape
// already reading its Stats still reports them once.
func (c *Collector) Remove(name string) bool {
	c.mustBeMade()
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.sources[name]
	delete(c.sources, name)
	return ok
}

// Describe implements prometheus.Collector. It sends the same descriptors
// whatever purgatories are added, which is what lets Add and Remove work
// after registration.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.delayed
	for _, k := range c.counters {
		ch <- k.desc
	}
	ch <- c.timeInPurgatory
}

// Collect implements prometheus.Collector: it reads each purgatory's Stats
// once and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	// Copy the sources out, then read them unlocked: Stats sums striped
	// counters, a Snapshot five histograms, and an Add or Remove should not wait
	// for that, nor for the registry to drain ch.
	type named struct {
		name string
		src  source
	}
	c.mu.RLock()
	srcs := make([]named, 0, len(c.sources))
	for name, s := range c.sources {
		srcs = append(srcs, named{name, s})
	}
	c.mu.RUnlock()

	for _, n := range srcs {
		st := n.src.stats.Stats()
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(st.Watched), n.name)
		ch <- prometheus.MustNewConstMetric(c.delayed, prometheus.GaugeValue, float64(st.Pending), n.name)
		for _, k := range c.counters {
			ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.get(&st)), n.name)
		}
		if n.src.times == nil {
			continue
		}
		// The outcome label is the library's name for each histogram. Every
		// outcome is sent, even when empty, so that its series exist from
		// the first scrape and rate() has a starting point.
		tip := n.src.times.Snapshot()
		for outcome, h := range tip.All() {
			cum, count := c.buckets.cumulative(h)
			ch <- prometheus.MustNewConstHistogram(c.timeInPurgatory, count, h.SumSeconds(), cum, n.name, outcome)
		}
	}
}

func (c *Collector) mustBeMade() {
	if c.sources == nil {
		panic("purgatoryprom: Collector not created with NewCollector")
	}
}
