package main

import (
	"context"
	"fmt"
	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/purgatory"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
)

// ScenarioConfig is the self-running demo: producers and consumers at a
// steady rate against a broker whose follower on one partition is slow.
type ScenarioConfig struct {
	Duration       time.Duration
	ProduceRate    float64 // produce requests per second
	Topics         []string
	Partitions     int
	Replicas       int
	Lag            time.Duration // followers' usual lag
	SlowLag        time.Duration // the slow follower's lag (partition 0 of the first topic)
	ProduceTimeout time.Duration
	MaxWait        time.Duration // consumers' fetch max wait
	MinBytes       int64
	ReplicaLagMax  time.Duration // see BrokerConfig; 0 keeps followers in sync
	Groups         GroupConfig   // the group coordinator's, for -kafka
	Trace          bool          // trace the produces (-trace)
	Progress       io.Writer     // progress display; nil for none
	// ProgressLive redraws one line in place with \r, for a terminal;
	// otherwise a plain line is written every ProgressEvery [1s].
	ProgressLive  bool
	ProgressEvery time.Duration
}

// Summary is what a scenario run reports.
type Summary struct {
	Produce, Fetch      kindSummary
	ProduceStats        purgatory.Stats
	FetchStats          purgatory.Stats
	ExpiredWithTimedOut int // expired produces whose response had REQUEST_TIMED_OUT

	// ProduceTimes and FetchTimes are how long requests stayed parked.
	ProduceTimes, FetchTimes timing.TimeInPurgatory
}

// kindSummary counts one kind of request by how it was answered: completed
// before its timeout, expired, or refused without being parked (the broker
// was closing). The three add up to Requests.
type kindSummary struct {
	Requests, CompletedEarly, Expired, Refused int
	P50, P99, Max                              time.Duration
}

type recorder struct {
	mu        sync.Mutex
	latencies []time.Duration
	early     int
	expired   int
	refused   int
}

func (r *recorder) add(lat time.Duration, expired, refused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies = append(r.latencies, lat)
	switch {
	case refused:
		r.refused++
	case expired:
		r.expired++
	default:
		r.early++
	}
}

func (r *recorder) summary() kindSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := kindSummary{Requests: len(r.latencies), CompletedEarly: r.early, Expired: r.expired, Refused: r.refused}
	if n := len(r.latencies); n > 0 {
		l := slices.Clone(r.latencies)
		slices.Sort(l)
		s.P50, s.P99, s.Max = l[n/2], l[n*99/100], l[n-1]
	}
	return s
}

// newBroker builds the broker the flags describe, the scenario's and the
// servers' alike: with the slow follower, follower 1 of the first
// partition, lagging SlowLag.
func (c ScenarioConfig) newBroker() (*Broker, error) {
	b, err := NewBroker(BrokerConfig{Topics: c.Topics, Partitions: c.Partitions, Replicas: c.Replicas, Lag: c.Lag,
		ReplicaLagMax: c.ReplicaLagMax, Groups: c.Groups, Trace: c.Trace})
	if err != nil {
		return nil, err
	}
	if c.Replicas > 0 {
		_ = b.SetFollower(b.Partitions()[0], 1, c.SlowLag, false)
	}
	return b, nil
}

// RunScenario runs the demo and returns its summary. Every request it sends
// is answered before it returns: completed early or expired.
func RunScenario(c ScenarioConfig) (Summary, error) {
	b, err := c.newBroker()
	if err != nil {
		return Summary{}, err
	}
	parts := b.Partitions()
	var prod, fetch recorder
	var timedOut atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), c.Duration)
	defer cancel()
	var wg sync.WaitGroup

	// Producers: a request every 1/rate, each to one or two random partitions.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Duration(float64(time.Second) / c.ProduceRate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			req := ProduceRequest{Acks: -1, Timeout: c.ProduceTimeout}
			first := rand.IntN(len(parts))
			for j := range 1 + rand.IntN(min(2, len(parts))) {
				tp := parts[(first+j)%len(parts)]
				batch := partlog.EncodeBatch([][]byte{fmt.Appendf(nil, "record-%d", i)}, time.Now())
				req.Partitions = append(req.Partitions, ProducePartition{TP: tp, Batch: batch})
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, span := startProduceSpan(c.Trace)
				req.Ctx = ctx
				resp := <-b.Produce(req)
				span.End()
				prod.add(resp.Latency, resp.Expired, resp.Refused)
				for _, r := range resp.Partitions {
					if resp.Expired && r.Err == errRequestTimedOut {
						timedOut.Add(1)
						break
					}
				}
			}()
		}
	}()

	// Consumers: one per partition, long-polling from where it left off.
	for _, tp := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offset := int64(0)
			for ctx.Err() == nil {
				ch, _ := b.Fetch(FetchRequest{Partitions: []FetchPartitionRequest{{TP: tp, Offset: offset}},
					MinBytes: c.MinBytes, MaxWait: c.MaxWait, Committed: true})
				resp := <-ch
				fetch.add(resp.Latency, resp.Expired, resp.Refused)
				offset = partlog.NextOffset(resp.Partitions[0].Batches, offset)
			}
		}()
	}

	// Progress.
	done := make(chan struct{})
	var pwg sync.WaitGroup
	if c.Progress != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			start := time.Now()
			every, prefix, suffix := c.ProgressEvery, "", "\n"
			if every <= 0 {
				every = time.Second
			}
			if c.ProgressLive {
				every, prefix, suffix = 200*time.Millisecond, "\r", " "
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-done:
					if c.ProgressLive {
						fmt.Fprintln(c.Progress)
					}
					return
				case <-t.C:
				}
				st := b.Stats()
				ps, fs := st.Produce, st.Fetch
				fmt.Fprintf(c.Progress, "%s%5.1fs  produce: %6d answered, %4d parked, %5d expired | fetch: %6d answered, %4d parked%s",
					prefix, time.Since(start).Seconds(), ps.CompletedEarly+ps.Expired, ps.Pending, ps.Expired,
					fs.CompletedEarly+fs.Expired, fs.Pending, suffix)
			}
		}()
	}

	<-ctx.Done()
	// No new requests now; the ones in flight finish on their own (within
	// the produce timeout or the max wait), so that every expiry counted is
	// a real timeout. Closing the broker first would expire them early, at
	// shutdown, and mix those into the figures.
	wg.Wait()
	closeErr := b.Close(context.Background())
	close(done)
	pwg.Wait()
	st := b.Stats()
	return Summary{Produce: prod.summary(), Fetch: fetch.summary(), ProduceStats: st.Produce, FetchStats: st.Fetch,
		ProduceTimes: b.produceTimes.Snapshot(), FetchTimes: b.fetchTimes.Snapshot(),
		ExpiredWithTimedOut: int(timedOut.Load())}, closeErr
}

// Print writes the summary as a table.
func (s Summary) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "request\trequests\tcompleted early\texpired\trefused\tp50\tp99\tmax\t")
	for _, r := range []struct {
		name string
		k    kindSummary
	}{{"produce (acks=all)", s.Produce}, {"fetch", s.Fetch}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%v\t%v\t\n", r.name, r.k.Requests, r.k.CompletedEarly, r.k.Expired, r.k.Refused,
			r.k.P50.Round(10*time.Microsecond), r.k.P99.Round(10*time.Microsecond), r.k.Max.Round(10*time.Microsecond))
	}
	tw.Flush()
	printTimeInPurgatory(w, s.ProduceTimes, s.FetchTimes)
	for _, p := range []struct {
		name string
		st   purgatory.Stats
	}{{"produce", s.ProduceStats}, {"fetch", s.FetchStats}} {
		fmt.Fprintf(w, "%s purgatory: pending %d, watched %d, completed early %d, expired %d, at shutdown %d, purged %d, panics %d\n",
			p.name, p.st.Pending, p.st.Watched, p.st.CompletedEarly, p.st.Expired, p.st.Shutdown, p.st.Purged, p.st.Panics)
	}
}

// printTimeInPurgatory writes the library's own measure of how long
// requests were parked (a timing.Recorder's), by how they completed.
func printTimeInPurgatory(w io.Writer, produce, fetch timing.TimeInPurgatory) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "time in purgatory	completed	n	p50	p90	p99	p99.9	")
	for _, p := range []struct {
		name string
		tip  timing.TimeInPurgatory
	}{{"produce", produce}, {"fetch", fetch}} {
		tip := p.tip
		for _, h := range []struct {
			how string
			h   *timing.Histogram
		}{{"early", &tip.CompletedEarly}, {"expired", &tip.Expired}, {"at shutdown", &tip.Shutdown}} {
			if h.h.Count() == 0 {
				continue
			}
			q := func(x float64) time.Duration { return h.h.Quantile(x).Round(10 * time.Microsecond) }
			fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\t%v\t%v\t\n", p.name, h.how, h.h.Count(), q(0.5), q(0.9), q(0.99), q(0.999))
		}
	}
	tw.Flush()
}
