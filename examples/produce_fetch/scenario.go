package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
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
	Progress       io.Writer // a live one-line progress display; nil for none
}

// Summary is what a scenario run reports.
type Summary struct {
	Produce, Fetch      kindSummary
	ProduceStats        any
	FetchStats          any
	ExpiredWithTimedOut int // expired produces whose response had REQUEST_TIMED_OUT
}

type kindSummary struct {
	Requests, CompletedEarly, Expired int
	P50, P99, Max                     time.Duration
}

type recorder struct {
	mu        sync.Mutex
	latencies []time.Duration
	early     int
	expired   int
}

func (r *recorder) add(lat time.Duration, expired bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies = append(r.latencies, lat)
	if expired {
		r.expired++
	} else {
		r.early++
	}
}

func (r *recorder) summary() kindSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := kindSummary{Requests: len(r.latencies), CompletedEarly: r.early, Expired: r.expired}
	if n := len(r.latencies); n > 0 {
		l := slices.Clone(r.latencies)
		slices.Sort(l)
		s.P50, s.P99, s.Max = l[n/2], l[n*99/100], l[n-1]
	}
	return s
}

// RunScenario runs the demo and returns its summary. Every request it sends
// is answered before it returns: completed early or expired.
func RunScenario(c ScenarioConfig) (Summary, error) {
	b, err := NewBroker(BrokerConfig{Topics: c.Topics, Partitions: c.Partitions, Replicas: c.Replicas, Lag: c.Lag})
	if err != nil {
		return Summary{}, err
	}
	parts := b.Partitions()
	if c.Replicas > 0 {
		_ = b.SetFollower(parts[0], 1, c.SlowLag, false)
	}
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
			recs := map[tpKey][][]byte{}
			for range 1 + rand.IntN(2) {
				tp := parts[rand.IntN(len(parts))]
				recs[tp] = append(recs[tp], fmt.Appendf(nil, "record-%d", i))
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp := <-b.Produce(ProduceRequest{Records: recs, Acks: -1, Timeout: c.ProduceTimeout})
				prod.add(resp.Latency, resp.Expired)
				for _, r := range resp.Partitions {
					if resp.Expired && r.Error == errRequestTimedOut {
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
				ch, _ := b.Fetch(FetchRequest{Offsets: map[tpKey]int64{tp: offset}, MinBytes: c.MinBytes,
					MaxWait: c.MaxWait, Committed: true})
				resp := <-ch
				fetch.add(resp.Latency, resp.Expired)
				offset = resp.Partitions[tp.String()].NextOffset
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
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					fmt.Fprintln(c.Progress)
					return
				case <-t.C:
				}
				ps, fs := b.Stats()
				fmt.Fprintf(c.Progress, "\r%5.1fs  produce: %6d answered, %4d parked, %5d expired | fetch: %6d answered, %4d parked ",
					time.Since(start).Seconds(), ps.CompletedEarly+ps.Expired, ps.Pending, ps.Expired,
					fs.CompletedEarly+fs.Expired, fs.Pending)
			}
		}()
	}

	<-ctx.Done()
	// Requests still parked are answered by the broker's shutdown (their
	// timeouts fire now), then every goroutine above has its answer.
	closeErr := b.Close(context.Background())
	wg.Wait()
	close(done)
	pwg.Wait()
	ps, fs := b.Stats()
	return Summary{Produce: prod.summary(), Fetch: fetch.summary(), ProduceStats: ps, FetchStats: fs,
		ExpiredWithTimedOut: int(timedOut.Load())}, closeErr
}

// Print writes the summary as a table.
func (s Summary) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "request\trequests\tcompleted early\texpired\tp50\tp99\tmax\t")
	for _, r := range []struct {
		name string
		k    kindSummary
	}{{"produce (acks=all)", s.Produce}, {"fetch", s.Fetch}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\t%v\t%v\t\n", r.name, r.k.Requests, r.k.CompletedEarly, r.k.Expired,
			r.k.P50.Round(10*time.Microsecond), r.k.P99.Round(10*time.Microsecond), r.k.Max.Round(10*time.Microsecond))
	}
	tw.Flush()
	fmt.Fprintf(w, "produce purgatory: %+v\nfetch purgatory:   %+v\n", s.ProduceStats, s.FetchStats)
}
