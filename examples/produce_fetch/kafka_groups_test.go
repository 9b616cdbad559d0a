package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/groups"
	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
)

// Short group timeouts keep the end-to-end tests to seconds; the bounds
// they assert leave room for a loaded two-core machine under -race.
const (
	testSession   = 1500 * time.Millisecond
	testHeartbeat = 150 * time.Millisecond
	testRebalance = 4 * time.Second
)

// groupBroker is startKafka with a topic of 8 partitions, no followers
// (acks=all commits at once) and the group coordinator's timeouts short:
// sessions from 100 ms, and a 100 ms initial rebalance delay.
func groupBroker(t *testing.T, onRemove func(string, groups.MemberSummary, groups.Removal)) *kafkaBroker {
	return startKafka(t, BrokerConfig{Topics: []string{"t"}, Partitions: 8, Groups: GroupConfig{
		InitialRebalanceDelay: 100 * time.Millisecond, MinSessionTimeout: 100 * time.Millisecond, OnRemove: onRemove}}, kafkawire.Config{})
}

// ledger counts the records a group consumed, each counted only once its
// offset is committed: a record a member fetched but could not commit
// (it crashed) is fetched again by the partition's next owner, and counted
// then. A record counted twice was consumed twice.
type ledger struct {
	mu     sync.Mutex
	seen   map[string]int // "partition/offset" -> times counted
	by     map[string]string
	firsts map[int32]time.Time // first record of each partition counted since reset
}

func newLedger() *ledger {
	return &ledger{seen: map[string]int{}, by: map[string]string{}, firsts: map[int32]time.Time{}}
}

func (l *ledger) add(who string, recs []*kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, r := range recs {
		k := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
		l.seen[k]++
		l.by[k] = who
		if _, ok := l.firsts[r.Partition]; !ok {
			l.firsts[r.Partition] = now
		}
	}
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *ledger) resetFirsts() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.firsts)
}

func (l *ledger) first(p int32) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.firsts[p]
	return at, ok
}

func (l *ledger) dups() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d []string
	for k, n := range l.seen {
		if n > 1 {
			d = append(d, fmt.Sprintf("%s x%d (last by %s)", k, n, l.by[k]))
		}
	}
	sort.Strings(d)
	return d
}

// cutter is a dialer whose connections can all be cut at once, and that
// refuses new ones afterwards: a client that has crashed, as far as the
// broker can tell. Its heartbeats stop without a LeaveGroup.
type cutter struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("cut")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, host)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) cutAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		conn.Close()
	}
}

// groupConsumer is one franz-go group member, consuming in a goroutine:
// each poll's records are committed synchronously, and counted in the
// ledger only once the commit succeeded. Rebalances wait between a poll
// and its commit (BlockRebalanceOnPoll), so a live member never commits
// a partition it has lost.
type groupConsumer struct {
	name  string
	cl    *kgo.Client
	done  chan struct{}
	mu    sync.Mutex
	owned map[int32]bool
}

func startConsumer(t *testing.T, kb *kafkaBroker, name string, l *ledger, extra ...kgo.Opt) *groupConsumer {
	t.Helper()
	gc := &groupConsumer{name: name, done: make(chan struct{}), owned: map[int32]bool{}}
	update := func(ps map[string][]int32, own bool) {
		gc.mu.Lock()
		defer gc.mu.Unlock()
		for _, p := range ps["t"] {
			if own {
				gc.owned[p] = true
			} else {
				delete(gc.owned, p)
			}
		}
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(kb.addr), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.SessionTimeout(testSession), kgo.HeartbeatInterval(testHeartbeat), kgo.RebalanceTimeout(testRebalance),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID(name),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { update(ps, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { update(ps, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { update(ps, false) }),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	gc.cl = cl
	go func() {
		defer close(gc.done)
		ctx := context.Background()
		for {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			if recs := fs.Records(); len(recs) > 0 {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if cl.CommitRecords(cctx, recs...) == nil {
					l.add(name, recs)
				}
				cancel()
			}
			cl.AllowRebalance()
		}
	}()
	t.Cleanup(gc.close)
	return gc
}

// close leaves the group (LeaveGroup) and stops the consuming goroutine.
func (gc *groupConsumer) close() {
	select {
	case <-gc.done:
		return
	default:
	}
	gc.cl.Close()
	<-gc.done
}

func (gc *groupConsumer) partitions() []int32 {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	var ps []int32
	for p := range gc.owned {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// ownAll says whether the consumers between them own each of the 8
// partitions exactly once, each consumer at least one.
func ownAll(gcs ...*groupConsumer) bool {
	seen := map[int32]int{}
	for _, gc := range gcs {
		ps := gc.partitions()
		if len(ps) == 0 {
			return false
		}
		for _, p := range ps {
			seen[p]++
		}
	}
	if len(seen) != 8 {
		return false
	}
	for _, n := range seen {
		if n != 1 {
			return false
		}
	}
	return true
}

// produceEach produces n records to each of the 8 partitions.
func produceEach(t *testing.T, ctx context.Context, producer *kgo.Client, n int, tag string) int {
	t.Helper()
	var recs []*kgo.Record
	for p := range int32(8) {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: "t", Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", tag, p, i)})
		}
	}
	require.NoError(t, producer.ProduceSync(ctx, recs...).FirstErr())
	return len(recs)
}

func describeMembers(t *testing.T, ctx context.Context, cl *kgo.Client, group string) (state string, members []string) {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp.Groups, 1)
	for _, m := range resp.Groups[0].Members {
		members = append(members, m.ClientID)
	}
	sort.Strings(members)
	return resp.Groups[0].State, members
}

// Three franz-go group consumers share 8 partitions. Every record
// produced is consumed exactly once while one member leaves (LeaveGroup
// when its client closes), one crashes (its connections are cut, so its
// heartbeats stop: its partitions move only once its session has
// expired), and the rest are restarted (the new members resume from the
// committed offsets).
func TestKafkaGroupConsumersShareAndHandOverPartitions(t *testing.T) {
	removed := make(chan string, 64)
	kb := groupBroker(t, func(_ string, m groups.MemberSummary, why groups.Removal) {
		if why == groups.RemovedSessionExpiry {
			removed <- m.ClientID
		}
	})
	ctx := testCtx(t, 120*time.Second)
	producer := kb.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	l := newLedger()
	var crash cutter
	c1 := startConsumer(t, kb, "c1", l)
	c2 := startConsumer(t, kb, "c2", l)
	c3 := startConsumer(t, kb, "c3", l, kgo.Dialer(crash.dial), kgo.RetryTimeout(time.Second))
	require.Eventually(t, func() bool { return ownAll(c1, c2, c3) }, 60*time.Second, 10*time.Millisecond,
		"the three members share the 8 partitions")
	t.Logf("assigned: c1 %v, c2 %v, c3 %v", c1.partitions(), c2.partitions(), c3.partitions())

	produced := produceEach(t, ctx, producer, 10, "a")
	require.Eventually(t, func() bool { return l.count() == produced }, 60*time.Second, 10*time.Millisecond)

	// A member leaves: its LeaveGroup takes it out of the group at once,
	// and the others take its partitions over.
	c1.close()
	_, members := describeMembers(t, ctx, producer, "g")
	assert.Equal(t, []string{"c2", "c3"}, members, "c1 left with its client's close, not at its session's end")
	produced += produceEach(t, ctx, producer, 10, "b")
	require.Eventually(t, func() bool { return ownAll(c2, c3) && l.count() == produced }, 60*time.Second, 10*time.Millisecond,
		"c2 and c3 consume everything, c1's partitions included")

	// A member crashes: nothing moves until its session expires.
	lost := c3.partitions()
	require.NotEmpty(t, lost)
	l.resetFirsts()
	crashed := time.Now()
	crash.cutAll()
	produced += produceEach(t, ctx, producer, 5, "c")
	var expiredAt time.Time
	select {
	case who := <-removed:
		expiredAt = time.Now()
		assert.Equal(t, "c3", who)
	case <-ctx.Done():
		t.Fatal("c3's session never expired")
	}
	require.Eventually(t, func() bool { return l.count() == produced }, 60*time.Second, 10*time.Millisecond,
		"c2 consumes c3's partitions once c3 has expired")
	// c3's last heartbeat came at most a heartbeat interval (and a round
	// trip) before the cut; its session runs from there.
	earliest := crashed.Add(testSession - testHeartbeat - 100*time.Millisecond)
	assert.False(t, expiredAt.Before(earliest), "expired %v after the crash, before its session could end", expiredAt.Sub(crashed))
	for _, p := range lost {
		at, ok := l.first(p)
		require.True(t, ok)
		assert.False(t, at.Before(earliest), "partition %d consumed %v after the crash, before c3's session ended", p, at.Sub(crashed))
	}
	t.Logf("c3 expired %v after the crash (session %v)", expiredAt.Sub(crashed), testSession)
	c3.close()

	// Restart: new members resume from the committed offsets, so they
	// consume only what is produced now.
	c2.close()
	produced += produceEach(t, ctx, producer, 5, "d")
	c4 := startConsumer(t, kb, "c4", l)
	c5 := startConsumer(t, kb, "c5", l)
	require.Eventually(t, func() bool { return l.count() == produced }, 60*time.Second, 10*time.Millisecond,
		"the restarted members consume what was produced while the group was down")
	assert.True(t, ownAll(c4, c5))
	assert.Empty(t, l.dups(), "every record consumed exactly once")
	assert.Equal(t, produced, l.count())
}
