package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
)

// followerReports makes follower id of p fetch at the leader's log end
// reporting log start offset logStart, as replicate does once it has taken
// in the leader's.
func followerReports(b *Broker, p tpKey, id int, logStart int64) {
	part := b.partitions[p]
	part.mu.Lock()
	leo := part.log.End()
	part.mu.Unlock()
	b.followerFetch(part, part.followers[id-1], leo, logStart, time.Now())
}

func deleteReq(timeout time.Duration, offsets map[tpKey]int64) DeleteRecordsRequest {
	r := DeleteRecordsRequest{Timeout: timeout}
	for _, p := range []tpKey{tp(0), tp(1), tp(2)} {
		if o, ok := offsets[p]; ok {
			r.Partitions = append(r.Partitions, DeleteRecordsPartition{TP: p, Offset: o})
		}
	}
	return r
}

func deleted(resp DeleteRecordsResponse, p tpKey) DeleteRecordsResult {
	for _, r := range resp.Partitions {
		if r.TP == p {
			return r
		}
	}
	return DeleteRecordsResult{TP: tpKey{Topic: "missing"}}
}

// Reference: Kafka's DeleteRecordsRequestTest and ReplicaManagerTest's
// delete records cases. On a MockTimer, with the followers moved by hand:
// the leader deletes at once, and the request is answered only when every
// follower has reported a log start offset at the offset asked for, each
// partition on its own; one whose follower does not report times out with
// REQUEST_TIMED_OUT and the low watermark as it was.
func TestDeleteRecordsWaitsForEveryFollowersLogStart(t *testing.T) {
	b, mt := newMockBroker(t, 2, 2)
	for _, p := range []tpKey{tp(0), tp(1)} {
		ch := b.Produce(produceReq(-1, time.Second, records(p, "a", "b", "c"), records(p, "d")))
		catchUp(b, p, 1)
		catchUp(b, p, 2)
		require.Nil(t, result(<-ch, p).Err)
	}

	ch := b.DeleteRecords(deleteReq(time.Second, map[tpKey]int64{tp(0): 3, tp(1): -1}))
	assert.True(t, pending(ch), "waits for the followers")
	st := b.partitions[tp(0)].state()
	assert.Equal(t, int64(3), st.logStart, "the leader deleted at once")
	assert.Equal(t, int64(0), st.lw)
	assert.Equal(t, int64(4), b.partitions[tp(1)].state().logStart, "-1 is the high watermark")

	followerReports(b, tp(0), 1, 3)
	followerReports(b, tp(0), 2, 2)
	assert.True(t, pending(ch), "follower 2 is not there yet")
	followerReports(b, tp(0), 2, 3)
	followerReports(b, tp(1), 1, 4)
	assert.True(t, pending(ch), "a request waits for every partition")
	mt.Advance(time.Second)
	resp := <-ch
	assert.True(t, resp.Expired)
	assert.Equal(t, DeleteRecordsResult{TP: tp(0), LowWatermark: 3}, deleted(resp, tp(0)))
	assert.Equal(t, DeleteRecordsResult{TP: tp(1), Err: errRequestTimedOut, LowWatermark: 0}, deleted(resp, tp(1)),
		"the low watermark when the leader deleted")
	assert.Equal(t, uint64(1), b.Stats().DeleteRecords.Expired)

	// Once the last follower reports, a request for no more than what
	// every replica deleted is answered at once.
	followerReports(b, tp(1), 2, 4)
	resp = <-b.DeleteRecords(deleteReq(time.Second, map[tpKey]int64{tp(1): 4}))
	assert.Equal(t, DeleteRecordsResult{TP: tp(1), LowWatermark: 4}, deleted(resp, tp(1)))
}

// A fetch below the log start offset is OFFSET_OUT_OF_RANGE, at once,
// and a parked one that a delete leaves below the log start is answered
// so as soon as the leader deletes.
func TestFetchBelowTheLogStartIsOutOfRange(t *testing.T) {
	b, _ := newMockBroker(t, 1, 0)
	require.Nil(t, result(<-b.Produce(produceReq(-1, time.Second, records(tp(0), "a"), records(tp(0), "b"))), tp(0)).Err)
	parked, _ := b.Fetch(fetchReq(1000, time.Minute, map[tpKey]int64{tp(0): 0}))
	assert.True(t, pending(parked))

	resp := <-b.DeleteRecords(deleteReq(time.Second, map[tpKey]int64{tp(0): 1}))
	assert.Equal(t, DeleteRecordsResult{TP: tp(0), LowWatermark: 1}, deleted(resp, tp(0)), "no follower to wait for")
	code, _ := fetched(t, <-parked, tp(0))
	assert.Equal(t, "OFFSET_OUT_OF_RANGE", code)

	ch, _ := b.Fetch(fetchReq(1, 0, map[tpKey]int64{tp(0): 0}))
	code, _ = fetched(t, <-ch, tp(0))
	assert.Equal(t, "OFFSET_OUT_OF_RANGE", code)
	ch, _ = b.Fetch(fetchReq(1, 0, map[tpKey]int64{tp(0): 1}))
	r := <-ch
	code, values := fetched(t, r, tp(0))
	assert.Equal(t, "NONE", code)
	assert.Equal(t, []string{"b"}, values)
	assert.Equal(t, int64(1), r.Partitions[0].LogStartOffset)
}

// deleteRecordsBroker is a broker served over Kafka's protocol with two
// followers on one partition, the ISR never shrinking, and a kadm client.
func deleteRecordsBroker(t *testing.T) (*kafkaBroker, *kgo.Client, *kadm.Client) {
	kb := startKafka(t, BrokerConfig{Partitions: 1, Replicas: 2, Lag: time.Millisecond, ReplicaLagMax: 0}, kafkawire.Config{})
	cl := kb.client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return kb, cl, kadm.NewClient(cl)
}

// produceOneByOne produces n records to t-0, each its own batch.
func produceOneByOne(t *testing.T, ctx context.Context, cl *kgo.Client, n int) {
	t.Helper()
	for range n {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("r")}).FirstErr())
	}
}

// kadm's DeleteRecords against the broker with running followers: the
// request is parked until both followers have fetched the leader's new
// log start offset and reported it, and then ListOffsets' earliest and
// fetches agree on the new start.
func TestKafkaDeleteRecordsWithFollowers(t *testing.T) {
	kb, cl, adm := deleteRecordsBroker(t)
	ctx := testCtx(t, 60*time.Second)
	produceOneByOne(t, ctx, cl, 10)

	resps, err := adm.DeleteRecords(ctx, kadm.Offsets{"t": {0: {At: 4}}})
	require.NoError(t, err)
	r, ok := resps.Lookup("t", 0)
	require.True(t, ok)
	require.NoError(t, r.Err)
	assert.GreaterOrEqual(t, r.LowWatermark, int64(4), "every replica has deleted below 4")
	for _, f := range kb.b.partitions[tp(0)].followers {
		kb.b.partitions[tp(0)].mu.Lock()
		assert.GreaterOrEqual(t, f.logStart, int64(4), "follower %d's log start", f.id)
		kb.b.partitions[tp(0)].mu.Unlock()
	}
	assert.Equal(t, uint64(1), kb.b.Stats().DeleteRecords.CompletedEarly, "parked, and completed by the followers' fetches")

	starts, err := adm.ListStartOffsets(ctx, "t")
	require.NoError(t, err)
	so, _ := starts.Lookup("t", 0)
	require.NoError(t, so.Err)
	assert.Equal(t, int64(4), so.Offset)

	assert.Equal(t, kerr.OffsetOutOfRange.Code, fetchAt(t, ctx, cl, 3).ErrorCode, "below the log start")
	rp := fetchAt(t, ctx, cl, 4)
	assert.Equal(t, int16(0), rp.ErrorCode)
	assert.Equal(t, int64(4), rp.LogStartOffset)

	// A consumer from the start begins at the log start.
	consumer := kb.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart()}}))
	fs := consumer.PollRecords(ctx, 1)
	require.NoError(t, fs.Err0())
	recs := fs.Records()
	require.NotEmpty(t, recs)
	assert.Equal(t, int64(4), recs[0].Offset)

	// Offset -1: everything committed.
	resps, err = adm.DeleteRecords(ctx, kadm.Offsets{"t": {0: {At: -1}}})
	require.NoError(t, err)
	r, _ = resps.Lookup("t", 0)
	require.NoError(t, r.Err)
	assert.Equal(t, int64(10), r.LowWatermark)
}

// fetchAt is a consumer's fetch of t-0 from offset, sent to the broker
// as it is, with no wait.
func fetchAt(t *testing.T, ctx context.Context, cl *kgo.Client, offset int64) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID, req.MaxBytes, req.MinBytes, req.MaxWaitMillis = -1, 1<<20, 0, 0
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.LogStartOffset = 0, offset, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(0))
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 1)
	return resp.Topics[0].Partitions[0]
}

// A stopped follower holds a DeleteRecords: it waits, parked, and
// completes once the follower resumes; with the follower stopped until
// the timeout, the answer is REQUEST_TIMED_OUT.
func TestKafkaDeleteRecordsWaitsForAStoppedFollower(t *testing.T) {
	kb, cl, adm := deleteRecordsBroker(t)
	ctx := testCtx(t, 60*time.Second)
	produceOneByOne(t, ctx, cl, 6)
	require.NoError(t, kb.b.SetFollower(tp(0), 2, time.Millisecond, true))

	type answer struct {
		resps kadm.DeleteRecordsResponses
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		resps, err := adm.DeleteRecords(ctx, kadm.Offsets{"t": {0: {At: 2}}}) // kadm's timeout: 15 s
		done <- answer{resps, err}
	}()
	require.Eventually(t, func() bool { return kb.b.Stats().DeleteRecords.Pending == 1 }, 30*time.Second, time.Millisecond,
		"the request is parked, waiting for follower 2")
	require.NoError(t, kb.b.SetFollower(tp(0), 2, time.Millisecond, false))
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		t.Fatal("not answered after the follower resumed")
	}
	require.NoError(t, a.err)
	r, _ := a.resps.Lookup("t", 0)
	require.NoError(t, r.Err)
	assert.GreaterOrEqual(t, r.LowWatermark, int64(2))

	require.NoError(t, kb.b.SetFollower(tp(0), 1, time.Millisecond, true))
	adm.SetTimeoutMillis(200)
	resps, err := adm.DeleteRecords(ctx, kadm.Offsets{"t": {0: {At: 5}}})
	require.NoError(t, err)
	r, _ = resps.Lookup("t", 0)
	assert.ErrorIs(t, r.Err, kerr.RequestTimedOut)
	assert.GreaterOrEqual(t, r.LowWatermark, int64(2), "the low watermark when the leader deleted")
	assert.Equal(t, uint64(1), kb.b.Stats().DeleteRecords.Expired)
	assert.Equal(t, kerr.OffsetOutOfRange.Code, fetchAt(t, ctx, cl, 4).ErrorCode, "the leader deleted all the same")
}

// Bad input: an offset past the high watermark is OFFSET_OUT_OF_RANGE
// (through kadm), and a partition the broker does not have is
// UNKNOWN_TOPIC_OR_PARTITION, each partition answered on its own (a raw
// request to the broker, since kadm checks partitions against Metadata
// before it sends).
func TestKafkaDeleteRecordsBadInput(t *testing.T) {
	kb, cl, adm := deleteRecordsBroker(t)
	ctx := testCtx(t, 60*time.Second)
	produceOneByOne(t, ctx, cl, 3)

	resps, err := adm.DeleteRecords(ctx, kadm.Offsets{"t": {0: {At: 4}}})
	require.NoError(t, err)
	r, _ := resps.Lookup("t", 0)
	assert.ErrorIs(t, r.Err, kerr.OffsetOutOfRange)
	assert.Equal(t, int64(-1), r.LowWatermark)
	assert.Equal(t, int64(0), kb.b.partitions[tp(0)].state().logStart, "nothing deleted")

	// One raw request, each partition answered on its own: t-0 named
	// twice (the second is INVALID_REQUEST), a partition and a topic the
	// broker does not have.
	resp := deleteRaw(t, ctx, cl, []deleteAt{{"t", 0, 1}, {"t", 7, 1}, {"nope", 0, 1}, {"t", 0, 2}})
	assert.Equal(t, []int16{0, kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicOrPartition.Code, kerr.InvalidRequest.Code},
		codes(resp))
	assert.GreaterOrEqual(t, resp.Topics[0].Partitions[0].LowWatermark, int64(1))
	assert.Equal(t, int64(-1), resp.Topics[1].Partitions[0].LowWatermark)

	// A negative offset other than -1 is out of range too.
	resp = deleteRaw(t, ctx, cl, []deleteAt{{"t", 0, -2}})
	assert.Equal(t, []int16{kerr.OffsetOutOfRange.Code}, codes(resp))
}

type deleteAt struct {
	topic     string
	partition int32
	offset    int64
}

// deleteRaw sends a DeleteRecords to the broker as it is, each partition
// as a topic of its own, in order.
func deleteRaw(t *testing.T, ctx context.Context, cl *kgo.Client, parts []deleteAt) *kmsg.DeleteRecordsResponse {
	t.Helper()
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 30000
	for _, p := range parts {
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = p.topic
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = p.partition, p.offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl.Broker(0))
	require.NoError(t, err)
	require.Len(t, resp.Topics, len(parts))
	return resp
}

func codes(resp *kmsg.DeleteRecordsResponse) []int16 {
	var cs []int16
	for _, rt := range resp.Topics {
		cs = append(cs, rt.Partitions[0].ErrorCode)
	}
	return cs
}
