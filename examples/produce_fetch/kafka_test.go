package main

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
)

// kafkaBroker is a broker served over Kafka's protocol on a loopback port,
// with real timers and follower goroutines.
type kafkaBroker struct {
	addr string
	b    *Broker
	ks   *kafkawire.Server
	stop func() error // ServeAll's shutdown; also run by t.Cleanup
}

func startKafka(t testing.TB, bc BrokerConfig, kc kafkawire.Config) *kafkaBroker {
	t.Helper()
	if bc.Topics == nil {
		bc.Topics = []string{"t"}
	}
	if bc.Partitions == 0 {
		bc.Partitions = 2
	}
	b, err := NewBroker(bc)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ks := NewKafkaServer(b, kc)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ServeAll(ctx, b, Servers{Kafka: ks, KafkaListener: ln}) }()
	var once sync.Once
	var serr error
	stop := func() error {
		once.Do(func() { cancel(); serr = <-errc })
		return serr
	}
	t.Cleanup(func() { assert.NoError(t, stop()) })
	return &kafkaBroker{addr: ln.Addr().String(), b: b, ks: ks, stop: stop}
}

// client is a franz-go client of kb, closed when the test ends (before
// the broker stops: cleanups run last-in first-out).
func (kb *kafkaBroker) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kb.addr)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A franz-go producer with its default settings (idempotent, so it asks
// for a producer ID first) and acks=all: its produce is parked until both
// followers have the records, and completes once the stopped one resumes.
func TestKafkaProduceAcksAllCompletesWhenFollowersCatchUp(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Replicas: 2, Lag: time.Millisecond}, kafkawire.Config{})
	require.NoError(t, kb.b.SetFollower(tp(0), 2, time.Millisecond, true))
	cl := kb.client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := testCtx(t, 30*time.Second)

	done := make(chan error, 1)
	var got *kgo.Record
	cl.Produce(ctx, &kgo.Record{Partition: 0, Value: []byte("hello")}, func(r *kgo.Record, err error) {
		got = r
		done <- err
	})
	require.Eventually(t, func() bool { return kb.b.Stats().Produce.Pending == 1 }, 10*time.Second, time.Millisecond,
		"the produce is parked, waiting for follower 2")
	select {
	case err := <-done:
		t.Fatalf("answered with follower 2 stopped: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, kb.b.SetFollower(tp(0), 2, time.Millisecond, false))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("not answered after the follower resumed")
	}
	assert.Equal(t, int64(0), got.Offset)
	assert.GreaterOrEqual(t, kb.b.partitions[tp(0)].state().hw, int64(1), "acknowledged only once committed")
	assert.Equal(t, uint64(1), kb.b.Stats().Produce.CompletedEarly)

	// And a second produce lands at the next offset.
	r := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("again")})
	require.NoError(t, r.FirstErr())
	assert.Equal(t, int64(1), r[0].Record.Offset)
}

// With a follower stopped and the ISR never shrinking, an acks=all
// produce expires at its timeout and the client sees REQUEST_TIMED_OUT:
// in the produce response, and, through franz-go's producer, which retries
// a timed-out batch, as a failure after its retries.
func TestKafkaProduceTimesOutWithAStoppedFollower(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Replicas: 1, ReplicaLagMax: 0}, kafkawire.Config{})
	require.NoError(t, kb.b.SetFollower(tp(1), 1, 0, true))
	ctx := testCtx(t, 30*time.Second)

	cl := kb.client(t)
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 300
	topic := kmsg.NewProduceRequestTopic()
	topic.Topic = "t"
	part := kmsg.NewProduceRequestTopicPartition()
	part.Partition, part.Records = 1, partlog.EncodeBatch([][]byte{[]byte("x")}, time.Now())
	topic.Partitions = append(topic.Partitions, part)
	req.Topics = append(req.Topics, topic)
	start := time.Now()
	resp, err := req.RequestWith(ctx, cl.Broker(0))
	took := time.Since(start)
	require.NoError(t, err)
	rp := resp.Topics[0].Partitions[0]
	assert.Equal(t, kerr.RequestTimedOut.Code, rp.ErrorCode)
	assert.Equal(t, int64(-1), rp.BaseOffset)
	assert.GreaterOrEqual(t, took, 300*time.Millisecond, "not before the produce's timeout")

	producer := kb.client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(),
		kgo.ProduceRequestTimeout(300*time.Millisecond), kgo.RecordRetries(1),
		kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	err = producer.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("y")}).FirstErr()
	assert.ErrorIs(t, err, kgo.ErrRecordRetries)
	st := kb.b.Stats().Produce
	assert.GreaterOrEqual(t, st.Expired, uint64(3), "one raw attempt and at least two by the producer")
	assert.Equal(t, uint64(0), st.CompletedEarly)
}

// With the ISR shrink on, the same stopped follower leaves the ISR after
// the lag max and acks=all completes without it; Metadata shows the ISR.
func TestKafkaISRShrinkKeepsAcksAllCompleting(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Replicas: 2, Lag: time.Millisecond, ReplicaLagMax: 300 * time.Millisecond}, kafkawire.Config{})
	require.NoError(t, kb.b.SetFollower(tp(1), 2, 0, true))
	cl := kb.client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProduceRequestTimeout(20*time.Second))
	ctx := testCtx(t, 30*time.Second)
	start := time.Now()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("x")}).FirstErr())
	assert.Less(t, time.Since(start), 15*time.Second, "answered after the ISR shrank, long before the timeout")
	assert.GreaterOrEqual(t, kb.b.Stats().ISRShrinks, int64(1))

	// Follower 1 keeps up with a 1 ms lag, but on a loaded machine its
	// fetch loop may miss the 300 ms window too; it then rejoins once it
	// catches up. So the ISR is read until it settles: follower 2, which
	// is stopped, out, and the others in.
	isr := func() []int32 {
		req := kmsg.NewPtrMetadataRequest()
		topic := kmsg.NewMetadataRequestTopic()
		topic.Topic = kmsg.StringPtr("t")
		req.Topics = append(req.Topics, topic)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.Len(t, resp.Topics, 1)
		var got []int32
		for _, p := range resp.Topics[0].Partitions {
			assert.Equal(t, []int32{0, 1, 2}, p.Replicas)
			if p.Partition == 1 {
				got = p.ISR
			}
		}
		return got
	}
	got := isr()
	for !slices.Equal(got, []int32{0, 1}) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		got = isr()
	}
	assert.Equal(t, []int32{0, 1}, got, "follower 2 left the ISR, follower 1 is in it")
}

// A consumer long-polling with a 5 s max wait gets a record within 100 ms of
// its produce: the produce's commit completes the parked fetch early.
func TestKafkaLongPollGetsTheRecordAtOnce(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Replicas: 1}, kafkawire.Config{})
	consumer := kb.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(5*time.Second))
	producer := kb.client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := testCtx(t, 30*time.Second)

	type got struct {
		values []string
		at     time.Time
	}
	polled := make(chan got, 1)
	go func() {
		for {
			fs := consumer.PollFetches(ctx)
			if ctx.Err() != nil {
				polled <- got{}
				return
			}
			var g got
			fs.EachRecord(func(r *kgo.Record) { g.values = append(g.values, string(r.Value)) })
			if len(g.values) > 0 {
				g.at = time.Now()
				polled <- g
				return
			}
		}
	}()
	require.Eventually(t, func() bool { return kb.b.Stats().ConsumerFetches >= 1 }, 10*time.Second, time.Millisecond,
		"the consumer's fetch is parked")
	sent := time.Now()
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("now")}).FirstErr())
	g := <-polled
	require.Equal(t, []string{"now"}, g.values)
	assert.Less(t, g.at.Sub(sent), 100*time.Millisecond, "the long poll is answered by the produce, not by its max wait")
	t.Logf("produce to consumer: %v", g.at.Sub(sent))
}

// A thousand long polls at once, from ten clients pipelining a hundred
// each, are all parked, and all answered by one produce.
func TestKafkaThousandLongPollsAreAllAnswered(t *testing.T) {
	const clients, perClient = 10, 100
	kb := startKafka(t, BrokerConfig{Replicas: 1, Lag: time.Millisecond}, kafkawire.Config{MaxInflight: perClient})
	ctx := testCtx(t, 60*time.Second)
	type answer struct {
		err   error
		bytes int
		code  int16
	}
	answers := make(chan answer, clients*perClient)
	for range clients {
		cl := kb.client(t)
		for range perClient {
			go func() {
				req := kmsg.NewPtrFetchRequest()
				req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 30_000, 1, 1<<20
				topic := kmsg.NewFetchRequestTopic()
				topic.Topic = "t"
				part := kmsg.NewFetchRequestTopicPartition()
				part.Partition, part.FetchOffset, part.PartitionMaxBytes = 0, 0, 1<<20
				topic.Partitions = append(topic.Partitions, part)
				req.Topics = append(req.Topics, topic)
				resp, err := req.RequestWith(ctx, cl.Broker(0))
				a := answer{err: err}
				if err == nil && len(resp.Topics) == 1 && len(resp.Topics[0].Partitions) == 1 {
					p := resp.Topics[0].Partitions[0]
					a.bytes, a.code = len(p.RecordBatches), p.ErrorCode
				}
				answers <- a
			}()
		}
	}
	require.Eventually(t, func() bool { return kb.b.Stats().ConsumerFetches == clients*perClient }, 30*time.Second, 5*time.Millisecond,
		"every fetch is parked")
	producer := kb.client(t, kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produced := time.Now()
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("wake up")}).FirstErr())
	for i := range clients * perClient {
		select {
		case a := <-answers:
			require.NoError(t, a.err)
			require.Equal(t, int16(0), a.code)
			require.Greater(t, a.bytes, 0, "answer %d carries the record", i)
		case <-ctx.Done():
			t.Fatalf("%d of %d long polls answered", i, clients*perClient)
		}
	}
	t.Logf("all %d answered %v after the produce", clients*perClient, time.Since(produced))
	st := kb.b.Stats()
	// The purgatory's counts include the follower's fetches, woken by the
	// same produce or expiring every replicaMaxWait.
	assert.GreaterOrEqual(t, st.Fetch.CompletedEarly, uint64(clients*perClient))
	assert.Equal(t, int64(0), st.ConsumerFetches)
}

// Shutting down with a parked produce and parked fetches answers all of
// them before the connections close: the produce with REQUEST_TIMED_OUT.
func TestKafkaShutdownAnswersParkedRequests(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Replicas: 1}, kafkawire.Config{})
	require.NoError(t, kb.b.SetFollower(tp(0), 1, 0, true))
	cl := kb.client(t)
	ctx := testCtx(t, 60*time.Second)
	const fetches = 5
	errs := make(chan error, fetches+1)
	go func() {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 30_000
		topic := kmsg.NewProduceRequestTopic()
		topic.Topic = "t"
		part := kmsg.NewProduceRequestTopicPartition()
		part.Records = partlog.EncodeBatch([][]byte{[]byte("x")}, time.Now())
		topic.Partitions = append(topic.Partitions, part)
		req.Topics = append(req.Topics, topic)
		resp, err := req.RequestWith(ctx, cl.Broker(0))
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
		}
		errs <- err
	}()
	for i := range fetches {
		go func() {
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis, req.MinBytes = 30_000, 1
			topic := kmsg.NewFetchRequestTopic()
			topic.Topic = "t"
			part := kmsg.NewFetchRequestTopicPartition()
			part.Partition, part.FetchOffset = int32(i%2), 0
			topic.Partitions = append(topic.Partitions, part)
			req.Topics = append(req.Topics, topic)
			resp, err := req.RequestWith(ctx, cl.Broker(0))
			if err == nil {
				err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
			}
			errs <- err
		}()
	}
	// Parked, not only accepted: the purgatory holds the five fetches and
	// at most one follower's (partition 1's; partition 0's was answered by
	// the produce's append and its follower, stopped, fetches no more).
	require.Eventually(t, func() bool {
		st := kb.b.Stats()
		return st.Produce.Pending == 1 && st.ConsumerFetches == fetches && st.Fetch.Pending >= fetches+1
	}, 10*time.Second, time.Millisecond, "everything is parked")
	start := time.Now()
	require.NoError(t, kb.stop())
	var timedOut, ok int
	for range fetches + 1 {
		select {
		case err := <-errs:
			switch {
			case err == nil:
				ok++
			case errors.Is(err, kerr.RequestTimedOut):
				timedOut++
			default:
				t.Errorf("unexpected answer: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("a parked request was not answered")
		}
	}
	assert.Equal(t, 1, timedOut, "the produce")
	assert.Equal(t, fetches, ok, "the fetches, with what was there")
	assert.Less(t, time.Since(start), 20*time.Second, "long before the 30 s timeouts")
	st := kb.b.Stats()
	// Counted as expired by the shutdown, apart from timeouts. The
	// follower completes its own fetch when the broker closes, so the
	// shutdown counts only the consumers'; its fetches may have expired
	// at replicaMaxWait before, so only the produce's expiries are zero.
	assert.Equal(t, uint64(1), st.Produce.Shutdown)
	assert.Equal(t, uint64(fetches), st.Fetch.Shutdown)
	assert.Equal(t, uint64(0), st.Produce.Expired)
}

// Records produced by a Kafka client (batched, compressed as franz-go
// compresses by default) read back over HTTP, and the HTTP mode's records
// over Kafka: both front ends share one log.
func TestKafkaAndHTTPShareTheLog(t *testing.T) {
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: 1, Replicas: 0})
	require.NoError(t, err)
	kln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- ServeAll(ctx, b, Servers{Kafka: NewKafkaServer(b, kafkawire.Config{}), KafkaListener: kln,
			HTTP: NewHTTPServer(hln.Addr().String(), b, HTTPConfig{}), HTTPListener: hln})
	}()
	defer func() { cancel(); assert.NoError(t, <-errc) }()

	cl, err := kgo.NewClient(kgo.SeedBrokers(kln.Addr().String()), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(50*time.Millisecond), kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	require.NoError(t, err)
	defer cl.Close()
	pctx := testCtx(t, 30*time.Second)
	// Repetitive values, so that compressing pays and franz-go keeps it.
	values := []string{strings.Repeat("one ", 50), strings.Repeat("two ", 50), strings.Repeat("three ", 50)}
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Partition: 0, Value: []byte(v)})
	}
	require.NoError(t, cl.ProduceSync(pctx, recs...).FirstErr())
	var rb kmsg.RecordBatch
	require.NoError(t, rb.ReadFrom(b.partitions[tp(0)].batches()[0]))
	require.Equal(t, int32(3), rb.NumRecords, "one batch of three")
	require.Equal(t, int16(kgo.CodecSnappy), rb.Attributes&0x07, "stored compressed, as sent")

	base := "http://" + hln.Addr().String()
	code, body := get(t, base+"/fetch?topic=t&partition=0&offset=1&max_wait_ms=0")
	require.Equal(t, 200, code)
	assert.Equal(t, []any{values[1], values[2]}, partitionOf(body, "t-0")["records"])

	code, _ = post(t, base+"/produce", `{"partitions":[{"topic":"t","partition":0,"records":["four"]}],"timeout_ms":1000}`)
	require.Equal(t, 200, code)
	consumer, err := kgo.NewClient(kgo.SeedBrokers(kln.Addr().String()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().At(3)}}))
	require.NoError(t, err)
	defer consumer.Close()
	fs := consumer.PollRecords(pctx, 1)
	require.NoError(t, fs.Err0())
	require.Len(t, fs.Records(), 1)
	assert.Equal(t, "four", string(fs.Records()[0].Value))
	assert.Equal(t, int64(3), fs.Records()[0].Offset)
}

// The same produce (acks=all) and consume round trip with the client held
// to older protocol versions, down to our lowest (Kafka 0.11's Produce v3,
// Fetch v5, Metadata v4), and with the newest both sides know.
func TestKafkaRoundTripAtEachVersion(t *testing.T) {
	for _, c := range []struct {
		name     string
		versions *kversion.Versions
	}{{"Kafka 0.11", kversion.V0_11_0()}, {"Kafka 2.4", kversion.V2_4_0()}, {"newest", nil}} {
		t.Run(c.name, func(t *testing.T) {
			kb := startKafka(t, BrokerConfig{Replicas: 1, Lag: time.Millisecond}, kafkawire.Config{})
			var opts []kgo.Opt
			if c.versions != nil {
				opts = append(opts, kgo.MaxVersions(c.versions))
			}
			ctx := testCtx(t, 30*time.Second)
			producer := kb.client(t, append(opts, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("t"),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
			var recs []*kgo.Record
			for _, v := range []string{"a", "b", "c"} {
				recs = append(recs, &kgo.Record{Partition: 1, Value: []byte(v), Key: []byte("k")})
			}
			require.NoError(t, producer.ProduceSync(ctx, recs...).FirstErr())

			consumer := kb.client(t, append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {1: kgo.NewOffset().AtStart()}}),
				kgo.FetchMaxWait(time.Second))...)
			var got []string
			for len(got) < 3 && ctx.Err() == nil {
				fs := consumer.PollFetches(ctx)
				require.NoError(t, fs.Err0())
				fs.EachRecord(func(r *kgo.Record) {
					assert.Equal(t, int64(len(got)), r.Offset)
					got = append(got, string(r.Value))
				})
			}
			assert.Equal(t, []string{"a", "b", "c"}, got)
		})
	}
}
