package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/purgatory-go/purgatory/timer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newMockBroker returns a broker on a MockTimer. No follower goroutine
// runs: tests replicate by hand with catchUp.
func newMockBroker(t *testing.T, partitions, replicas int) (*Broker, *timer.MockTimer) {
	t.Helper()
	mt := timer.NewMockTimer()
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: partitions, Replicas: replicas, Timer: mt})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close(context.Background())) })
	return b, mt
}

func tp(n int32) tpKey { return tpKey{Topic: "t", Partition: n} }

// catchUp makes follower id of p fetch everything the leader has.
func catchUp(b *Broker, p tpKey, id int) {
	part := b.partitions[p]
	part.mu.Lock()
	leo := int64(len(part.log))
	part.mu.Unlock()
	b.followerFetched(part, part.followers[id-1], leo)
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
	ch := b.Produce(ProduceRequest{Records: map[tpKey][][]byte{tp(0): {[]byte("a"), []byte("b")}}, Acks: -1, Timeout: time.Second})
	assert.True(t, pending(ch), "waits for the followers")
	catchUp(b, tp(0), 1)
	assert.True(t, pending(ch), "one follower of two is not enough")
	catchUp(b, tp(0), 2)
	resp := <-ch
	assert.False(t, resp.Expired)
	assert.Equal(t, PartitionResult{Error: errNone, Offset: 2}, resp.Partitions["t-0"])
}

func TestProduceExpiresWithPerPartitionErrors(t *testing.T) {
	b, mt := newMockBroker(t, 2, 1)
	ch := b.Produce(ProduceRequest{Records: map[tpKey][][]byte{tp(0): {[]byte("a")}, tp(1): {[]byte("b")}},
		Acks: -1, Timeout: 100 * time.Millisecond})
	catchUp(b, tp(0), 1)
	assert.True(t, pending(ch), "a multi-partition produce waits for every partition")
	mt.Advance(100*time.Millisecond - 1)
	assert.True(t, pending(ch), "not before the timeout")
	mt.Advance(1)
	resp := <-ch
	assert.True(t, resp.Expired)
	assert.Equal(t, errNone, resp.Partitions["t-0"].Error)
	assert.Equal(t, errRequestTimedOut, resp.Partitions["t-1"].Error)
	ps, _ := b.Stats()
	assert.Equal(t, uint64(1), ps.Expired)
}

func TestProduceAnswersNotLeaderWhenLeadershipMoves(t *testing.T) {
	b, _ := newMockBroker(t, 2, 1)
	ch := b.Produce(ProduceRequest{Records: map[tpKey][][]byte{tp(0): {[]byte("a")}, tp(1): {[]byte("b")}},
		Acks: -1, Timeout: time.Second})
	catchUp(b, tp(1), 1)
	b.Resign(tp(0))
	resp := <-ch
	assert.False(t, resp.Expired)
	assert.Equal(t, errNotLeader, resp.Partitions["t-0"].Error)
	assert.Equal(t, errNone, resp.Partitions["t-1"].Error)

	// A produce to a partition the broker no longer leads fails at once.
	resp = <-b.Produce(ProduceRequest{Records: map[tpKey][][]byte{tp(0): {[]byte("c")}}, Acks: -1, Timeout: time.Second})
	assert.Equal(t, errNotLeader, resp.Partitions["t-0"].Error)
}

func TestProduceWithAcksOneAnswersAtOnce(t *testing.T) {
	b, _ := newMockBroker(t, 1, 2)
	resp := <-b.Produce(ProduceRequest{Records: map[tpKey][][]byte{tp(0): {[]byte("a")}}, Acks: 1, Timeout: time.Second})
	assert.Equal(t, PartitionResult{Error: errNone, Offset: 1}, resp.Partitions["t-0"])
	ps, _ := b.Stats()
	assert.Equal(t, 0, ps.Pending)
}

func TestFetchCompletesWhenBytesAreCommitted(t *testing.T) {
	b, _ := newMockBroker(t, 1, 1)
	ch, _ := b.Fetch(FetchRequest{Offsets: map[tpKey]int64{tp(0): 0}, MinBytes: 5, MaxWait: time.Second, Committed: true})
	_, _ = b.Append(tp(0), [][]byte{[]byte("abc")})
	catchUp(b, tp(0), 1)
	assert.True(t, pending(ch), "3 bytes of 5")
	_, _ = b.Append(tp(0), [][]byte{[]byte("defg")})
	assert.True(t, pending(ch), "appended but not yet replicated: not visible to a consumer")
	catchUp(b, tp(0), 1)
	resp := <-ch
	assert.False(t, resp.Expired)
	assert.Equal(t, FetchPartition{Error: errNone, HighWatermark: 2, Records: []string{"abc", "defg"}, NextOffset: 2},
		resp.Partitions["t-0"])
}

func TestFetchReturnsWhatIsThereAtMaxWait(t *testing.T) {
	b, mt := newMockBroker(t, 2, 0)
	ch, _ := b.Fetch(FetchRequest{Offsets: map[tpKey]int64{tp(0): 0, tp(1): 0}, MinBytes: 100, MaxWait: 50 * time.Millisecond, Committed: true})
	_, _ = b.Append(tp(1), [][]byte{[]byte("x")}) // no followers: committed at once
	mt.Advance(50 * time.Millisecond)
	resp := <-ch
	assert.True(t, resp.Expired)
	assert.Empty(t, resp.Partitions["t-0"].Records)
	assert.Equal(t, []string{"x"}, resp.Partitions["t-1"].Records)
}

func TestFetchBeyondTheLogAnswersAtOnce(t *testing.T) {
	b, _ := newMockBroker(t, 1, 0)
	ch, _ := b.Fetch(FetchRequest{Offsets: map[tpKey]int64{tp(0): 7}, MinBytes: 1, MaxWait: time.Second})
	resp := <-ch
	assert.Equal(t, errOffsetOutOfRange, resp.Partitions["t-0"].Error)
}

func TestCloseAnswersParkedRequests(t *testing.T) {
	mt := timer.NewMockTimer()
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: 1, Replicas: 1, Timer: mt})
	require.NoError(t, err)
	pch := b.Produce(ProduceRequest{Records: map[tpKey][][]byte{tp(0): {[]byte("a")}}, Acks: -1, Timeout: time.Hour})
	fch, _ := b.Fetch(FetchRequest{Offsets: map[tpKey]int64{tp(0): 1}, MinBytes: 1, MaxWait: time.Hour, Committed: true})
	require.NoError(t, b.Close(context.Background()))
	assert.Equal(t, errRequestTimedOut, (<-pch).Partitions["t-0"].Error)
	assert.True(t, (<-fch).Expired)
	resp := <-b.Produce(ProduceRequest{Records: map[tpKey][][]byte{tp(0): {[]byte("b")}}, Acks: -1, Timeout: time.Hour})
	assert.Equal(t, errBrokerShuttingDwn, resp.Partitions["t-0"].Error, "after Close requests are refused, not parked")
}
