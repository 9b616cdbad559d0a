package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/goleak"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
	"github.com/purgatory-go/purgatory/timer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newMockBroker returns a broker on a MockTimer. No follower goroutine
// runs: tests replicate by hand with catchUp.
func newMockBroker(t *testing.T, partitions, replicas int) (*Broker, *timer.MockTimer) {
	t.Helper()
	mt := timer.NewMockTimer()
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: partitions, Replicas: replicas, Timer: mt, ByHand: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close(context.Background())) })
	return b, mt
}

func tp(n int32) tpKey { return tpKey{Topic: "t", Partition: n} }

// catchUp makes follower id of p fetch at the leader's log end: it has
// everything the leader has.
func catchUp(b *Broker, p tpKey, id int) {
	catchUpAt(b, p, id, time.Now())
}

func catchUpAt(b *Broker, p tpKey, id int, at time.Time) {
	part := b.partitions[p]
	part.mu.Lock()
	leo := part.log.End()
	part.mu.Unlock()
	b.followerFetch(part, part.followers[id-1], leo, 0, at)
}

// records is one partition's part of a produce: a batch of values.
func records(p tpKey, values ...string) ProducePartition {
	var vs [][]byte
	for _, v := range values {
		vs = append(vs, []byte(v))
	}
	return ProducePartition{TP: p, Batch: partlog.EncodeBatch(vs, time.Now())}
}

func produceReq(acks int, timeout time.Duration, parts ...ProducePartition) ProduceRequest {
	return ProduceRequest{Partitions: parts, Acks: acks, Timeout: timeout}
}

func fetchReq(minBytes int64, maxWait time.Duration, offsets map[tpKey]int64) FetchRequest {
	r := FetchRequest{MinBytes: minBytes, MaxWait: maxWait, Committed: true}
	for _, p := range []tpKey{tp(0), tp(1), tp(2)} {
		if o, ok := offsets[p]; ok {
			r.Partitions = append(r.Partitions, FetchPartitionRequest{TP: p, Offset: o})
		}
	}
	return r
}

// result finds a partition's part of an answer.
func result(resp ProduceResponse, p tpKey) PartitionResult {
	for _, r := range resp.Partitions {
		if r.TP == p {
			return r
		}
	}
	return PartitionResult{TP: tpKey{Topic: "missing"}}
}

func fetched(t *testing.T, resp FetchResponse, p tpKey) (code string, values []string) {
	t.Helper()
	for _, r := range resp.Partitions {
		if r.TP == p {
			vs, _, err := partlog.DecodeValues(r.Batches, r.Offset)
			require.NoError(t, err)
			for _, v := range vs {
				values = append(values, string(v))
			}
			return errName(r.Err), values
		}
	}
	t.Fatalf("no %v in the answer", p)
	return "", nil
}

func pending[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

func TestProduceCompletesWhenReplicasCatchUp(t *testing.T) {
	b, _ := newMockBroker(t, 1, 2)
	ch := b.Produce(produceReq(-1, time.Second, records(tp(0), "a", "b")))
	assert.True(t, pending(ch), "waits for the followers")
	catchUp(b, tp(0), 1)
	assert.True(t, pending(ch), "one follower of two is not enough")
	catchUp(b, tp(0), 2)
	resp := <-ch
	assert.False(t, resp.Expired)
	assert.Equal(t, PartitionResult{TP: tp(0), BaseOffset: 0, Offset: 2}, result(resp, tp(0)))

	// The next batch gets the next offsets.
	ch = b.Produce(produceReq(-1, time.Second, records(tp(0), "c")))
	catchUp(b, tp(0), 1)
	catchUp(b, tp(0), 2)
	assert.Equal(t, PartitionResult{TP: tp(0), BaseOffset: 2, Offset: 3}, result(<-ch, tp(0)))
}

func TestProduceExpiresWithPerPartitionErrors(t *testing.T) {
	b, mt := newMockBroker(t, 2, 1)
	ch := b.Produce(produceReq(-1, 100*time.Millisecond, records(tp(0), "a"), records(tp(1), "b")))
	catchUp(b, tp(0), 1)
	assert.True(t, pending(ch), "a multi-partition produce waits for every partition")
	mt.Advance(100*time.Millisecond - 1)
	assert.True(t, pending(ch), "not before the timeout")
	mt.Advance(1)
	resp := <-ch
	assert.True(t, resp.Expired)
	assert.Nil(t, result(resp, tp(0)).Err)
	assert.Equal(t, errRequestTimedOut, result(resp, tp(1)).Err)
	assert.Equal(t, int64(-1), result(resp, tp(1)).BaseOffset)
	assert.Equal(t, uint64(1), b.Stats().Produce.Expired)
}

func TestProduceAnswersNotLeaderWhenLeadershipMoves(t *testing.T) {
	b, _ := newMockBroker(t, 2, 1)
	ch := b.Produce(produceReq(-1, time.Second, records(tp(0), "a"), records(tp(1), "b")))
	catchUp(b, tp(1), 1)
	b.Resign(tp(0))
	resp := <-ch
	assert.False(t, resp.Expired)
	assert.Equal(t, errNotLeader, result(resp, tp(0)).Err)
	assert.Nil(t, result(resp, tp(1)).Err)

	// A produce to a partition the broker no longer leads fails at once.
	resp = <-b.Produce(produceReq(-1, time.Second, records(tp(0), "c")))
	assert.Equal(t, errNotLeader, result(resp, tp(0)).Err)
}

func TestProduceWithAcksOneAnswersAtOnce(t *testing.T) {
	b, _ := newMockBroker(t, 1, 2)
	resp := <-b.Produce(produceReq(1, time.Second, records(tp(0), "a")))
	assert.Equal(t, PartitionResult{TP: tp(0), BaseOffset: 0, Offset: 1}, result(resp, tp(0)))
	assert.Equal(t, 0, b.Stats().Produce.Pending)
}

// Bad batches and bad partitions are answered per partition, and the good
// partitions of the same request are written.
func TestProduceRejectsBadBatchesPerPartition(t *testing.T) {
	b, _ := newMockBroker(t, 3, 0)
	corrupt := records(tp(1), "x")
	corrupt.Batch[len(corrupt.Batch)-1] ^= 0xff // a value byte: the CRC no longer matches
	two := records(tp(2), "y")
	two.Batch = append(two.Batch, two.Batch...)
	resp := <-b.Produce(produceReq(-1, time.Second, records(tp(0), "ok"), corrupt, two,
		records(tpKey{Topic: "nope", Partition: 0}, "z")))
	assert.Nil(t, result(resp, tp(0)).Err)
	assert.Equal(t, kerr.CorruptMessage, result(resp, tp(1)).Err)
	assert.Equal(t, kerr.InvalidRecord, result(resp, tp(2)).Err)
	assert.Equal(t, errUnknownPartition, result(resp, tpKey{Topic: "nope", Partition: 0}).Err)
	assert.Equal(t, int64(0), b.partitions[tp(1)].state().leo, "nothing written for a rejected batch")

	resp = <-b.Produce(produceReq(2, time.Second, records(tp(0), "a")))
	assert.Equal(t, kerr.InvalidRequiredAcks, result(resp, tp(0)).Err)
}

func TestFetchCompletesWhenBytesAreCommitted(t *testing.T) {
	b, _ := newMockBroker(t, 1, 1)
	first := records(tp(0), "abc")
	ch, _ := b.Fetch(fetchReq(int64(len(first.Batch))+1, time.Second, map[tpKey]int64{tp(0): 0}))
	<-b.Produce(produceReq(1, time.Second, first))
	catchUp(b, tp(0), 1)
	assert.True(t, pending(ch), "one batch is not min_bytes")
	<-b.Produce(produceReq(1, time.Second, records(tp(0), "defg")))
	assert.True(t, pending(ch), "appended but not yet replicated: not visible to a consumer")
	catchUp(b, tp(0), 1)
	resp := <-ch
	assert.False(t, resp.Expired)
	code, values := fetched(t, resp, tp(0))
	assert.Equal(t, "NONE", code)
	assert.Equal(t, []string{"abc", "defg"}, values)
	assert.Equal(t, int64(2), resp.Partitions[0].HighWatermark)
}

// A fetch from the middle of a batch gets the whole batch (as in Kafka);
// the records before the fetch offset are skipped by the reader.
func TestFetchFromInsideABatch(t *testing.T) {
	b, _ := newMockBroker(t, 1, 0)
	<-b.Produce(produceReq(1, time.Second, records(tp(0), "a", "b", "c")))
	resp := <-must(b.Fetch(fetchReq(1, time.Second, map[tpKey]int64{tp(0): 1})))
	require.Len(t, resp.Partitions[0].Batches, 1)
	_, values := fetched(t, resp, tp(0))
	assert.Equal(t, []string{"b", "c"}, values)
	assert.Equal(t, int64(3), partlog.NextOffset(resp.Partitions[0].Batches, 1))
}

func must[T, U any](t T, _ U) T { return t }

func TestFetchReturnsWhatIsThereAtMaxWait(t *testing.T) {
	b, mt := newMockBroker(t, 2, 0)
	ch, _ := b.Fetch(fetchReq(1000, 50*time.Millisecond, map[tpKey]int64{tp(0): 0, tp(1): 0}))
	<-b.Produce(produceReq(1, time.Second, records(tp(1), "x"))) // no followers: committed at once
	mt.Advance(50 * time.Millisecond)
	resp := <-ch
	assert.True(t, resp.Expired)
	_, v0 := fetched(t, resp, tp(0))
	_, v1 := fetched(t, resp, tp(1))
	assert.Empty(t, v0)
	assert.Equal(t, []string{"x"}, v1)
}

func TestFetchBeyondTheLogAnswersAtOnce(t *testing.T) {
	b, _ := newMockBroker(t, 1, 0)
	resp := <-must(b.Fetch(fetchReq(1, time.Second, map[tpKey]int64{tp(0): 7})))
	assert.Equal(t, errOffsetOutOfRange, resp.Partitions[0].Err)
}

// Kafka's replica.lag.time.max.ms: a follower that stopped fetching leaves
// the in-sync replicas, the high watermark moves without it, and the
// acks=all produce waiting on it completes; when it catches up it rejoins.
func TestStoppedFollowerLeavesTheISR(t *testing.T) {
	mt := timer.NewMockTimer()
	start := time.Now()
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: 1, Replicas: 2, Timer: mt,
		ByHand: true, ReplicaLagMax: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close(context.Background())) })

	ch := b.Produce(produceReq(-1, time.Hour, records(tp(0), "a")))
	catchUpAt(b, tp(0), 1, start.Add(150*time.Millisecond))
	b.shrinkISR(start.Add(90 * time.Millisecond))
	assert.True(t, pending(ch), "follower 2 is not yet past the lag max")
	b.shrinkISR(start.Add(200 * time.Millisecond))
	resp := <-ch
	assert.False(t, resp.Expired)
	assert.Nil(t, result(resp, tp(0)).Err, "completed by the ISR shrinking to the leader and follower 1")
	assert.Equal(t, []int32{1}, b.partitions[tp(0)].state().isr)
	assert.Equal(t, int64(1), b.Stats().ISRShrinks)

	catchUpAt(b, tp(0), 2, start.Add(300*time.Millisecond))
	assert.Equal(t, []int32{1, 2}, b.partitions[tp(0)].state().isr, "rejoins once it reaches the high watermark")
	assert.Equal(t, int64(1), b.Stats().ISRExpands)
}

func TestCloseAnswersParkedRequests(t *testing.T) {
	mt := timer.NewMockTimer()
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: 1, Replicas: 1, Timer: mt, ByHand: true})
	require.NoError(t, err)
	pch := b.Produce(produceReq(-1, time.Hour, records(tp(0), "a")))
	fch, _ := b.Fetch(fetchReq(1, time.Hour, map[tpKey]int64{tp(0): 1}))
	require.NoError(t, b.Close(context.Background()))
	presp := <-pch
	assert.Equal(t, errRequestTimedOut, result(presp, tp(0)).Err)
	assert.True(t, presp.Expired)
	assert.True(t, (<-fch).Expired)

	resp := <-b.Produce(produceReq(-1, time.Hour, records(tp(0), "b")))
	assert.Equal(t, errBrokerClosing, result(resp, tp(0)).Err, "after Close requests are refused, not parked")
	assert.True(t, resp.Refused)
	assert.False(t, resp.Expired)
	fresp := <-must(b.Fetch(fetchReq(1, time.Hour, map[tpKey]int64{tp(0): 0})))
	assert.True(t, fresp.Refused)
	st := b.Stats()
	assert.Equal(t, uint64(0), st.Produce.CompletedEarly, "a refused request is not counted as completed")
	assert.Equal(t, uint64(0), st.Fetch.CompletedEarly)
}

// The followers' fetches, parked in the fetch purgatory and woken by the
// leader's append, are what complete an acks=all produce: on a MockTimer
// that never advances, no timeout and no timer-driven poll can. The
// follower goroutines run (ByHand is off); each has a fetch parked before
// the produce, the append completes both, and their next fetches move the
// high watermark.
func TestFollowerFetchCompletesAcksAll(t *testing.T) {
	mt := timer.NewMockTimer()
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: 1, Replicas: 2, Timer: mt})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close(context.Background())) })
	require.Eventually(t, func() bool { return b.Stats().Fetch.Pending == 2 }, 10*time.Second, time.Millisecond,
		"both followers' fetches are parked")

	ch := b.Produce(produceReq(-1, time.Hour, records(tp(0), "a")))
	select {
	case resp := <-ch:
		assert.False(t, resp.Expired)
		assert.Equal(t, PartitionResult{TP: tp(0), BaseOffset: 0, Offset: 1}, result(resp, tp(0)))
	case <-time.After(10 * time.Second):
		t.Fatal("the acks=all produce was not completed by the followers' fetches")
	}
	st := b.Stats()
	assert.Equal(t, uint64(1), st.Produce.CompletedEarly)
	assert.GreaterOrEqual(t, st.Fetch.CompletedEarly, uint64(2), "the append completed both followers' parked fetches")
	assert.Equal(t, uint64(0), st.Fetch.Expired)
	assert.Equal(t, time.Duration(0), mt.Now(), "the timer never moved")
	assert.Equal(t, []int32{1, 2}, b.partitions[tp(0)].state().isr)
}

// A stopped follower takes in nothing once SetFollower returns, not even
// from a fetch it had parked; resumed, it fetches what it missed and the
// waiting produce completes.
func TestStoppedFollowerTakesInNothing(t *testing.T) {
	mt := timer.NewMockTimer()
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: 1, Replicas: 2, Timer: mt})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close(context.Background())) })
	require.Eventually(t, func() bool { return b.Stats().Fetch.Pending == 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, b.SetFollower(tp(0), 2, 0, true))

	ch := b.Produce(produceReq(-1, time.Hour, records(tp(0), "a")))
	p := b.partitions[tp(0)]
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.followers[0].leo == 1
	}, 10*time.Second, time.Millisecond, "follower 1 fetches the record")
	p.mu.Lock()
	leo2 := p.followers[1].leo
	p.mu.Unlock()
	assert.Equal(t, int64(0), leo2, "follower 2, stopped, took in nothing")
	assert.True(t, pending(ch), "the produce waits for follower 2")

	require.NoError(t, b.SetFollower(tp(0), 2, 0, false))
	select {
	case resp := <-ch:
		assert.Nil(t, result(resp, tp(0)).Err)
	case <-time.After(10 * time.Second):
		t.Fatal("not completed after follower 2 resumed")
	}
}
