package main

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
)

// The benchmarks below measure the broker as a Kafka client sees it, over
// loopback, with and without followers in the same run, so that the cost
// of replication reads as a ratio. Run them alone on a quiet machine:
//
//	cd examples && go test -run '^$' -bench 'AcksAllProduce|LongPollWakeUp' -count 3 ./produce_fetch

// BenchmarkAcksAllProduce is one franz-go producer with acks=all sending one
// record at a time: each op is one record produced and acknowledged. With
// followers (no lag), each acknowledgement waits for both followers'
// fetches: the append wakes their parked fetches, and their next fetches
// move the high watermark.
func BenchmarkAcksAllProduce(b *testing.B) {
	for _, replicas := range []int{0, 2} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			kb := startKafka(b, BrokerConfig{Replicas: replicas}, kafkawire.Config{})
			cl := kb.client(b, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
				kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			ctx := testCtx(b, 10*time.Minute)
			value := []byte("one record")
			// The first produce pays for metadata and the producer ID.
			require.NoError(b, cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: value}).FirstErr())
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: value}).FirstErr(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			reportQuantiles(b, lat)
		})
	}
}

// BenchmarkLongPollWakeUp is 100 franz-go consumers long-polling one
// partition (5 s max wait) while a producer sends one record at a time:
// each op is one record, produced once every consumer's fetch is parked,
// and the latencies are from the produce call to each consumer's poll
// returning it. With followers the record is readable once they have it,
// so this includes their round of fetches.
func BenchmarkLongPollWakeUp(b *testing.B) {
	const consumers = 100
	for _, replicas := range []int{0, 2} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			kb := startKafka(b, BrokerConfig{Replicas: replicas}, kafkawire.Config{})
			ctx := testCtx(b, 10*time.Minute)
			got := make(chan time.Time, consumers)
			var wg sync.WaitGroup
			b.Cleanup(wg.Wait) // registered first, so it runs after the clients close
			for range consumers {
				cl := kb.client(b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtEnd()}}),
					kgo.FetchMaxWait(5*time.Second))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						fs := cl.PollFetches(ctx)
						if fs.IsClientClosed() || ctx.Err() != nil {
							return
						}
						fs.EachRecord(func(*kgo.Record) { got <- time.Now() })
					}
				}()
			}
			producer := kb.client(b, kgo.ProducerLinger(0), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			lat := make([]time.Duration, 0, b.N*consumers)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				require.Eventually(b, func() bool { return kb.b.Stats().ConsumerFetches == consumers }, time.Minute, 50*time.Microsecond,
					"every consumer's fetch is parked")
				b.StartTimer()
				sent := time.Now()
				producer.Produce(ctx, &kgo.Record{Partition: 0, Value: []byte("wake up")}, nil)
				for range consumers {
					select {
					case at := <-got:
						lat = append(lat, at.Sub(sent))
					case <-ctx.Done():
						b.Fatal("a consumer did not get the record")
					}
				}
			}
			b.StopTimer()
			reportQuantiles(b, lat)
		})
	}
}

func reportQuantiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	q := func(x float64) float64 { return float64(lat[int(x*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
