package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Kafka's error codes, as kerr has them; nil is NONE.
var (
	errRequestTimedOut  = kerr.RequestTimedOut
	errNotLeader        = kerr.NotLeaderForPartition
	errUnknownPartition = kerr.UnknownTopicOrPartition
	errOffsetOutOfRange = kerr.OffsetOutOfRange
	errBrokerClosing    = kerr.BrokerNotAvailable
)

// errName is a Kafka error code's name, as the HTTP mode writes it.
func errName(e *kerr.Error) string {
	switch e {
	case nil:
		return "NONE"
	case kerr.NotLeaderForPartition:
		return "NOT_LEADER_OR_FOLLOWER" // Kafka's name since 2.7
	}
	return e.Message
}

type tpKey = operation.TopicPartitionKey

// partition is the leader's view of one topic-partition: its log, its
// followers and which of them are in sync, and the high watermark, the
// offset below which every in-sync replica has the data.
type partition struct {
	key tpKey

	mu        sync.Mutex
	log       partlog.Log // its end is the leader's log end offset
	hw        int64       // high watermark
	leader    bool        // false once leadership moves away
	followers []*follower
}

// follower is a replica that copies the leader's log. Its goroutine
// (replicate) fetches from the leader as Kafka's replica fetchers do, and
// the leader learns its log end offset from the offset of its next fetch.
type follower struct {
	id int
	// Guarded by the partition's mu:
	leo      int64     // log end offset
	logStart int64     // log start offset, as its last fetch reported it
	caughtUp time.Time // last time it had the whole of the leader's log
	inSync   bool      // a member of the in-sync replicas (ISR)
	stopped  bool      // its fetches are ignored; replicate waits on resume
	// The leader's log end offset at the follower's previous fetch, and
	// when that fetch came: Kafka's lastFetchLeaderLogEndOffset and
	// lastFetchTimeMs, from which a fetch that is behind the leader's log
	// end can still prove the follower caught up at the previous one.
	lastFetchLEO  int64
	lastFetchTime time.Time

	lag    atomic.Int64  // how long it takes to append what it fetched
	resume chan struct{} // SetFollower signals a resume here, without blocking
}

// Broker is an in-memory broker: partitions it leads, their follower
// replicas, and the three purgatories of Kafka's ReplicaManager. Its
// methods are safe for concurrent use.
type Broker struct {
	partitions    map[tpKey]*partition
	topics        map[string][]*partition // by topic, in partition order
	produce       *purgatory.Purgatory[tpKey, *DelayedProduce]
	fetch         *purgatory.Purgatory[tpKey, *DelayedFetch]
	deleteRecords *purgatory.Purgatory[tpKey, *DelayedDeleteRecords]
	groups        *Coordinator // consumer groups and their offsets (delayed_group.go)
	// produceTimes and fetchTimes time the two purgatories' operations.
	produceTimes, fetchTimes *timing.Recorder

	lagMax     time.Duration
	isrShrinks atomic.Int64
	isrExpands atomic.Int64
	// consumerFetches counts consumers' fetches accepted and not yet
	// answered; the fetch purgatory's Pending also counts the followers'.
	consumerFetches atomic.Int64
	closed          atomic.Bool
	stop            chan struct{}
	wg              sync.WaitGroup
	closeOnce       sync.Once
	closeResult     error
}

// BrokerConfig says how to build a Broker.
type BrokerConfig struct {
	Topics     []string
	Partitions int           // per topic
	Replicas   int           // followers per partition
	Lag        time.Duration // how long a follower takes to append what it fetched
	// ReplicaLagMax is Kafka's replica.lag.time.max.ms: a follower that
	// has not caught up with the leader's log end for this long leaves the
	// in-sync replicas, so that acks=all produces stop waiting for it. It
	// rejoins once it reaches the high watermark. Zero keeps every
	// follower in sync forever.
	ReplicaLagMax time.Duration
	Timer         timer.Timer // for tests: a MockTimer; nil for real timers
	// ByHand starts no follower goroutines: a test moves each follower
	// itself with followerFetch. The ISR expiry task runs only with real
	// timers (Timer nil); a test calls shrinkISR.
	ByHand bool
	// Groups configures the group coordinator; its Timer defaults to
	// Timer.
	Groups GroupConfig
	// Trace traces parked produces (trace.go).
	Trace bool
}

// replicaMaxWait is how long a follower's fetch waits in the fetch
// purgatory for the leader's next append: Kafka's
// replica.fetch.wait.max.ms. A follower of an idle partition re-fetches
// this often, which is what keeps it counted as caught up.
const replicaMaxWait = 500 * time.Millisecond

// NewBroker starts a broker and its followers.
func NewBroker(c BrokerConfig) (*Broker, error) {
	if c.Partitions <= 0 || len(c.Topics) == 0 || c.Replicas < 0 || c.ReplicaLagMax < 0 {
		return nil, errors.New("broker: need topics, partitions > 0, replicas >= 0 and a replica lag max >= 0")
	}
	seen := map[string]bool{}
	for _, t := range c.Topics {
		if t == "" || strings.ContainsAny(t, " \t\n/") || seen[t] {
			return nil, fmt.Errorf("broker: bad or repeated topic name %q", t)
		}
		seen[t] = true
	}
	// The demo prints, and /metrics exports, how long requests stay parked.
	produceTimes, fetchTimes := new(timing.Recorder), new(timing.Recorder)
	popts, err := produceObservers(c.Trace)
	if err != nil {
		return nil, err
	}
	popts = append(popts, purgatory.WithObserver(produceTimes))
	if c.Timer != nil {
		popts = append(popts, purgatory.WithTimer(c.Timer), purgatory.WithoutReaper())
	}
	pp, err := purgatory.New[tpKey, *DelayedProduce]("Produce", popts...)
	if err != nil {
		return nil, err
	}
	fopts := []purgatory.Option{purgatory.WithObserver(fetchTimes)}
	if c.Timer != nil {
		// Both purgatories share the test's timer; only one may close it.
		fopts = append(fopts, purgatory.WithTimer(sharedTimer{c.Timer}), purgatory.WithoutReaper())
	}
	fp, err := purgatory.New[tpKey, *DelayedFetch]("Fetch", fopts...)
	if err != nil {
		_ = pp.Shutdown(context.Background())
		return nil, err
	}
	var dopts []purgatory.Option
	if c.Timer != nil {
		dopts = append(dopts, purgatory.WithTimer(sharedTimer{c.Timer}), purgatory.WithoutReaper())
	}
	dp, err := purgatory.New[tpKey, *DelayedDeleteRecords]("DeleteRecords", dopts...)
	if err != nil {
		_ = pp.Shutdown(context.Background())
		_ = fp.Shutdown(context.Background())
		return nil, err
	}
	if c.Groups.Timer == nil {
		c.Groups.Timer = c.Timer
	}
	gc, err := NewCoordinator(c.Groups)
	if err != nil {
		_ = pp.Shutdown(context.Background())
		_ = fp.Shutdown(context.Background())
		_ = dp.Shutdown(context.Background())
		return nil, err
	}
	b := &Broker{
		partitions:    make(map[tpKey]*partition),
		topics:        make(map[string][]*partition),
		produce:       pp,
		fetch:         fp,
		deleteRecords: dp,
		groups:        gc,
		lagMax:        c.ReplicaLagMax,
		stop:          make(chan struct{}),
	}
	b.produceTimes, b.fetchTimes = produceTimes, fetchTimes
	now := time.Now()
	for _, topic := range c.Topics {
		for i := range c.Partitions {
			p := &partition{key: tpKey{Topic: topic, Partition: int32(i)}, leader: true}
			for r := range c.Replicas {
				f := &follower{id: r + 1, inSync: true, caughtUp: now, lastFetchTime: now, resume: make(chan struct{}, 1)}
				f.lag.Store(int64(c.Lag))
				p.followers = append(p.followers, f)
			}
			b.partitions[p.key] = p
			b.topics[topic] = append(b.topics[topic], p)
		}
	}
	// The followers' goroutines start only once every partition is whole:
	// a fetch reads its partition's followers, which the loop above writes
	// without the partition's lock.
	if !c.ByHand {
		for _, p := range b.partitions {
			for _, f := range p.followers {
				b.wg.Add(1)
				go b.replicate(p, f)
			}
		}
	}
	if c.Timer == nil && !c.ByHand && c.ReplicaLagMax > 0 && c.Replicas > 0 {
		b.wg.Add(1)
		go b.expireISR()
	}
	return b, nil
}

// sharedTimer lets two purgatories use one timer without closing it twice.
type sharedTimer struct{ timer.Timer }

func (sharedTimer) Close() error { return nil }

// Partitions lists the partitions the broker leads, in order.
func (b *Broker) Partitions() []tpKey {
	keys := make([]tpKey, 0, len(b.partitions))
	for k := range b.partitions {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y tpKey) int {
		if c := strings.Compare(x.Topic, y.Topic); c != 0 {
			return c
		}
		return int(x.Partition - y.Partition)
	})
	return keys
}

// Topics lists the topics, in order.
func (b *Broker) Topics() []string {
	var ts []string
	for t := range b.topics {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

// Append writes a record batch (already checked by partlog.ParseBatch) to the
// leader's log, and returns its base offset and the log end offset after
// it, or an error code. It wakes fetches waiting for data on the partition;
// a produce with acks=all then waits for the high watermark.
func (b *Broker) Append(tp tpKey, raw []byte, numRecords int32) (base, end int64, e *kerr.Error) {
	p := b.partitions[tp]
	if p == nil {
		return 0, 0, errUnknownPartition
	}
	p.mu.Lock()
	if !p.leader {
		p.mu.Unlock()
		return 0, 0, errNotLeader
	}
	base = p.log.Append(raw, numRecords)
	end = p.log.End()
	hwMoved := p.updateHighWatermarkLocked()
	hw := p.hw
	p.mu.Unlock()
	// The partition's lock is released before checking: a TryComplete takes
	// it (see docs/purgatory.md, "what not to hold").
	b.fetch.CheckAndComplete(tp)
	if hwMoved { // no follower in sync: the leader alone commits
		b.produce.CheckAndCompleteUpTo(tp, hw)
	}
	return base, end, nil
}

// updateHighWatermarkLocked sets the high watermark to the smallest log end
// offset over the leader and its in-sync followers, and reports whether it
// moved. It only moves forward, as in Kafka. The caller holds p.mu.
func (p *partition) updateHighWatermarkLocked() bool {
	hw := p.log.End()
	for _, f := range p.followers {
		if f.inSync {
			hw = min(hw, f.leo)
		}
	}
	if hw > p.hw {
		p.hw = hw
		return true
	}
	return false
}

// replicate is follower f of p, fetching as Kafka's ReplicaFetcherThread
// does, through the broker's own fetch path (FetchFunc with its replica
// id): its fetch waits in the fetch purgatory beside the consumers' until
// the leader's append wakes it (Append's CheckAndComplete), or for
// replicaMaxWait. What it fetched it appends lag later; its next fetch,
// from the offset after it, tells the leader its new log end offset
// (followerFetch), which moves the high watermark and completes the
// acks=all produces waiting on it. No timer paces it: the only waits are
// for the leader's data, the lag, and a resume after SetFollower stopped it.
//
// Its log start offset follows the leader's as Kafka's follower's does
// (KIP-107), by this rule: each fetch's answer carries the leader's log
// start offset, and once the follower has taken in that answer its own log
// start becomes the leader's, or its log end if that is lower (it cannot
// start past what it has). Its next fetch reports it (followerFetch). A
// follower whose fetch offset the leader has deleted (OFFSET_OUT_OF_RANGE,
// it was behind when the records were deleted) starts again, empty, at the
// leader's log start, as Kafka's follower truncates fully and does.
func (b *Broker) replicate(p *partition, f *follower) {
	defer b.wg.Done()
	offset := int64(0)                     // its log end offset: where it fetches from
	logStart := int64(0)                   // its log start offset
	answers := make(chan FetchResponse, 1) // one fetch at a time
	for {
		df := b.FetchFunc(FetchRequest{Partitions: []FetchPartitionRequest{{TP: p.key, Offset: offset, LogStartOffset: logStart}},
			MinBytes: 1, MaxWait: replicaMaxWait, ReplicaID: f.id}, func(r FetchResponse) { answers <- r })
		var resp FetchResponse
		select {
		case <-b.stop:
			df.ForceComplete() // not left for the purgatory's Shutdown to count
			return
		case resp = <-answers:
		}
		if r := resp.Partitions[0]; r.Err == errOffsetOutOfRange && !resp.Refused && offset < r.LogStartOffset {
			offset, logStart = r.LogStartOffset, r.LogStartOffset
			continue
		}
		if resp.Refused || resp.Partitions[0].Err != nil {
			// The broker no longer leads p (Resign is for good) or is
			// closing: there is no leader here to fetch from again.
			<-b.stop
			return
		}
		next := partlog.NextOffset(resp.Partitions[0].Batches, offset)
		if lag := time.Duration(f.lag.Load()); lag > 0 && next > offset {
			t := time.NewTimer(lag)
			select {
			case <-b.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		// A follower stopped meanwhile drops what it fetched and fetches
		// it again once resumed. The leader ignores its fetches while it is
		// stopped (followerFetch), so once SetFollower returns it takes in
		// nothing, even from a fetch already on its way.
		p.mu.Lock()
		stopped := f.stopped
		p.mu.Unlock()
		if stopped {
			if b.waitForResume(p, f) {
				return
			}
			continue
		}
		offset = next
		logStart = max(logStart, min(resp.Partitions[0].LogStartOffset, next))
	}
}

// waitForResume blocks while f is stopped, and reports whether the broker
// closed meanwhile.
func (b *Broker) waitForResume(p *partition, f *follower) (closed bool) {
	for {
		select {
		case <-b.stop:
			return true
		case <-f.resume:
		}
		p.mu.Lock()
		stopped := f.stopped
		p.mu.Unlock()
		if !stopped {
			return false
		}
	}
}

// followerFetch is the leader's side of a fetch by f from offset at time
// at: Kafka's Partition.updateFollowerFetchState, then, if the high
// watermark moved, tryCompleteDelayedRequests. A follower fetches from its
// log end offset, so offset is its log end offset now. It was caught up at
// this fetch if offset is the leader's log end, or at its previous fetch
// if offset reaches what the leader's log end was then. It rejoins the
// in-sync replicas once it reaches the high watermark. A stopped follower's
// fetch changes nothing.
//
// The fetch also carries the follower's log start offset, logStart, as
// Kafka's follower fetches do (KIP-107): the low watermark, the smallest
// log start offset of the replicas, may move, completing DeleteRecords
// requests.
func (b *Broker) followerFetch(p *partition, f *follower, offset, logStart int64, at time.Time) {
	p.mu.Lock()
	if f.stopped {
		p.mu.Unlock()
		return
	}
	lwBefore := p.lowWatermarkLocked()
	f.logStart = max(f.logStart, logStart)
	lw := p.lowWatermarkLocked()
	f.leo = max(f.leo, offset)
	switch {
	case offset >= p.log.End():
		f.caughtUp = laterOf(f.caughtUp, at)
	case offset >= f.lastFetchLEO:
		f.caughtUp = laterOf(f.caughtUp, f.lastFetchTime)
	}
	f.lastFetchLEO, f.lastFetchTime = p.log.End(), at
	if !f.inSync && f.leo >= p.hw {
		f.inSync = true
		b.isrExpands.Add(1)
	}
	moved := p.updateHighWatermarkLocked()
	hw := p.hw
	p.mu.Unlock()
	if moved {
		b.highWatermarkMoved(p.key, hw)
	}
	if lw > lwBefore {
		// Leveled, as the produces on the high watermark: only the
		// requests whose offset the low watermark reached are tried.
		b.deleteRecords.CheckAndCompleteUpTo(p.key, lw)
	}
}

// lowWatermarkLocked is the smallest log start offset over the leader and
// its followers (Kafka's Partition.lowWatermarkIfLeader): below it no
// replica holds anything, which is when a DeleteRecords is done. As in
// Kafka it counts every replica whose broker is alive, in sync or not; the
// followers here all are, a stopped one included (its broker is up, its
// fetching stalled). It only rises. The caller holds p.mu.
func (p *partition) lowWatermarkLocked() int64 {
	lw := p.log.Start()
	for _, f := range p.followers {
		lw = min(lw, f.logStart)
	}
	return lw
}

func laterOf(x, y time.Time) time.Time {
	if y.After(x) {
		return y
	}
	return x
}

// highWatermarkMoved wakes what waits on tp's high watermark, now hw. The
// caller has released the partition's lock, which a TryComplete takes.
// Produces wait for the high watermark to reach their offsets (levels):
// only those it reached are tried. Fetches read committed data, so the
// move may have given them their bytes.
func (b *Broker) highWatermarkMoved(tp tpKey, hw int64) {
	b.produce.CheckAndCompleteUpTo(tp, hw)
	b.fetch.CheckAndComplete(tp)
}

// expireISR is Kafka's isr-expiration task: every half of the replica lag
// max, drop the followers that have not caught up for longer than it.
func (b *Broker) expireISR() {
	defer b.wg.Done()
	t := time.NewTicker(max(b.lagMax/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case now := <-t.C:
			b.shrinkISR(now)
		}
	}
}

// shrinkISR removes from each partition's in-sync replicas the followers
// that were last caught up before now - lagMax. With fewer replicas to wait
// for, the high watermark may move, completing acks=all produces.
func (b *Broker) shrinkISR(now time.Time) {
	if b.lagMax <= 0 {
		return
	}
	for _, p := range b.partitions {
		p.mu.Lock()
		for _, f := range p.followers {
			if f.inSync && now.Sub(f.caughtUp) > b.lagMax {
				f.inSync = false
				b.isrShrinks.Add(1)
			}
		}
		moved := p.updateHighWatermarkLocked()
		hw := p.hw
		p.mu.Unlock()
		if moved {
			b.highWatermarkMoved(p.key, hw)
		}
	}
}

// Resign makes the broker stop leading tp, as when leadership moves to
// another broker: waiting produces, fetches and DeleteRecords for it are
// answered with NOT_LEADER_OR_FOLLOWER.
func (b *Broker) Resign(tp tpKey) {
	p := b.partitions[tp]
	if p == nil {
		return
	}
	p.mu.Lock()
	p.leader = false
	p.mu.Unlock()
	b.produce.CheckAndComplete(tp)
	b.fetch.CheckAndComplete(tp)
	b.deleteRecords.CheckAndComplete(tp)
}

// SetFollower changes follower id (1-based) of tp: its lag, and whether it
// fetches at all. Once it returns with stopped set, the follower's log end
// offset stays where it is until a call that resumes it.
func (b *Broker) SetFollower(tp tpKey, id int, lag time.Duration, stopped bool) error {
	p := b.partitions[tp]
	if p == nil || id < 1 || id > len(p.followers) {
		return fmt.Errorf("no follower %d of %v", id, tp)
	}
	f := p.followers[id-1]
	f.lag.Store(int64(lag))
	p.mu.Lock()
	f.stopped = stopped
	p.mu.Unlock()
	if !stopped {
		select {
		case f.resume <- struct{}{}:
		default: // a resume is signalled already
		}
	}
	return nil
}

// partitionState is what requests read of a partition, in one snapshot.
type partitionState struct {
	leader   bool
	leo, hw  int64
	logStart int64   // the leader's log start offset
	lw       int64   // low watermark (lowWatermarkLocked)
	isr      []int32 // follower ids in sync, ascending
	all      []int32 // every follower id
}

// state reads what a TryComplete or a metadata answer needs, under the
// partition's lock.
func (p *partition) state() partitionState {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := partitionState{leader: p.leader, leo: p.log.End(), hw: p.hw, logStart: p.log.Start(), lw: p.lowWatermarkLocked()}
	for _, f := range p.followers {
		s.all = append(s.all, int32(f.id))
		if f.inSync {
			s.isr = append(s.isr, int32(f.id))
		}
	}
	return s
}

// bytesBetween is how many bytes a read of offsets [from, to) returns.
func (p *partition) bytesBetween(from, to int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.BytesBetween(from, to)
}

// read returns the whole batches holding offsets [from, to), up to
// maxBytes (partlog.Log.Read).
func (p *partition) read(from, to, maxBytes int64, minOne bool) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Read(from, to, maxBytes, minOne)
}

// offsetForTimestamp is ListOffsets by time (partlog.Log.OffsetForTimestamp).
func (p *partition) offsetForTimestamp(ts int64) (offset, timestamp int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.OffsetForTimestamp(ts)
}

// batches returns the stored batches, for tests.
func (p *partition) batches() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Batches()
}

// BrokerStats is what the status line shows.
type BrokerStats struct {
	// Fetch counts the followers' fetches with the consumers', as Kafka's
	// fetch purgatory does.
	Produce, Fetch, DeleteRecords purgatory.Stats
	ISRShrinks, ISRExpands        int64
	// ConsumerFetches is how many consumers' fetches are accepted and not
	// yet answered: parked, or about to be.
	ConsumerFetches int64
	Groups          GroupStats
}

// Stats returns the purgatories' counters and the ISR changes.
func (b *Broker) Stats() BrokerStats {
	return BrokerStats{Produce: b.produce.Stats(), Fetch: b.fetch.Stats(), DeleteRecords: b.deleteRecords.Stats(),
		ISRShrinks: b.isrShrinks.Load(), ISRExpands: b.isrExpands.Load(), ConsumerFetches: b.consumerFetches.Load(),
		Groups: b.groups.Stats()}
}

// Close unloads the consumer groups, answering their parked JoinGroups
// and SyncGroups with NOT_COORDINATOR, stops the followers, each
// completing its own parked fetch, and shuts its purgatories down, which
// answers every request still waiting (their timeouts fire early), so that
// nothing parked is dropped. Requests that arrive afterwards are refused.
func (b *Broker) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		gerr := b.groups.Close(ctx)
		close(b.stop)
		b.wg.Wait()
		b.closeResult = errors.Join(gerr, b.produce.Shutdown(ctx), b.fetch.Shutdown(ctx), b.deleteRecords.Shutdown(ctx))
	})
	return b.closeResult
}
