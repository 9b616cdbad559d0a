package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Kafka's error codes, as they appear in responses.
const (
	errNone              = "NONE"
	errRequestTimedOut   = "REQUEST_TIMED_OUT"
	errNotLeader         = "NOT_LEADER_OR_FOLLOWER"
	errUnknownPartition  = "UNKNOWN_TOPIC_OR_PARTITION"
	errOffsetOutOfRange  = "OFFSET_OUT_OF_RANGE"
	errInvalidRequest    = "INVALID_REQUEST"
	errBrokerShuttingDwn = "BROKER_NOT_AVAILABLE"
)

type tpKey = operation.TopicPartitionKey

// partition is the leader's view of one topic-partition: its log, the
// offsets its followers have fetched up to, and the high watermark, the
// offset below which every in-sync replica has the data.
type partition struct {
	key tpKey

	mu        sync.Mutex
	log       [][]byte // record values; a record's offset is its index
	bytes     []int64  // bytes[i]: total size of records [0, i)
	hw        int64    // high watermark
	leader    bool     // false once leadership moves away
	followers []*follower
}

// follower is a replica that copies the leader's log. Its goroutine fetches
// every fetchEvery, and what it fetched becomes its log end offset lag
// later, as if the data took that long to cross the network and be written.
type follower struct {
	id      int
	leo     int64 // log end offset; guarded by the partition's mu
	lag     atomic.Int64
	stopped atomic.Bool
}

// Broker is a small in-memory broker: partitions it leads, their follower
// replicas, and the two purgatories of Kafka's ReplicaManager.
type Broker struct {
	partitions map[tpKey]*partition
	produce    *purgatory.Purgatory[tpKey, *DelayedProduce]
	fetch      *purgatory.Purgatory[tpKey, *DelayedFetch]

	fetchEvery time.Duration
	stop       chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once
}

// BrokerConfig says how to build a Broker.
type BrokerConfig struct {
	Topics     []string
	Partitions int           // per topic
	Replicas   int           // followers per partition
	Lag        time.Duration // how far followers trail the leader
	FetchEvery time.Duration // how often followers fetch
	Timer      timer.Timer   // for tests: a MockTimer; nil for real timers
}

// NewBroker starts a broker and its followers.
func NewBroker(c BrokerConfig) (*Broker, error) {
	if c.Partitions <= 0 || len(c.Topics) == 0 || c.Replicas < 0 {
		return nil, errors.New("broker: need topics, partitions > 0 and replicas >= 0")
	}
	if c.FetchEvery <= 0 {
		c.FetchEvery = 5 * time.Millisecond
	}
	var popts []purgatory.Option
	if c.Timer != nil {
		popts = append(popts, purgatory.WithTimer(c.Timer), purgatory.WithoutReaper())
	}
	pp, err := purgatory.New[tpKey, *DelayedProduce]("Produce", popts...)
	if err != nil {
		return nil, err
	}
	var fopts []purgatory.Option
	if c.Timer != nil {
		// Both purgatories share the test's timer; only one may close it.
		fopts = append(fopts, purgatory.WithTimer(sharedTimer{c.Timer}), purgatory.WithoutReaper())
	}
	fp, err := purgatory.New[tpKey, *DelayedFetch]("Fetch", fopts...)
	if err != nil {
		_ = pp.Shutdown(context.Background())
		return nil, err
	}
	b := &Broker{
		partitions: make(map[tpKey]*partition),
		produce:    pp,
		fetch:      fp,
		fetchEvery: c.FetchEvery,
		stop:       make(chan struct{}),
	}
	for _, topic := range c.Topics {
		for i := range c.Partitions {
			p := &partition{key: tpKey{Topic: topic, Partition: int32(i)}, leader: true, bytes: []int64{0}}
			for r := range c.Replicas {
				f := &follower{id: r + 1}
				f.lag.Store(int64(c.Lag))
				p.followers = append(p.followers, f)
				if c.Timer == nil {
					b.wg.Add(1)
					go b.replicate(p, f)
				}
			}
			b.partitions[p.key] = p
		}
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
		if x.Topic != y.Topic {
			if x.Topic < y.Topic {
				return -1
			}
			return 1
		}
		return int(x.Partition - y.Partition)
	})
	return keys
}

// Append writes records to the leader's log and returns the offset after
// the last one, or an error code. It wakes fetches waiting for data on the
// partition; a produce with acks=all then waits for the high watermark.
func (b *Broker) Append(tp tpKey, records [][]byte) (int64, string) {
	p := b.partitions[tp]
	if p == nil {
		return 0, errUnknownPartition
	}
	p.mu.Lock()
	if !p.leader {
		p.mu.Unlock()
		return 0, errNotLeader
	}
	for _, r := range records {
		p.log = append(p.log, r)
		p.bytes = append(p.bytes, p.bytes[len(p.bytes)-1]+int64(len(r)))
	}
	end := int64(len(p.log))
	if len(p.followers) == 0 {
		p.hw = end // no one else to wait for
	}
	p.mu.Unlock()
	// The partition's lock is released before checking: a TryComplete takes
	// it (see docs/purgatory.md, "what not to hold").
	b.fetch.CheckAndComplete(tp)
	if len(p.followers) == 0 {
		b.produce.CheckAndComplete(tp)
	}
	return end, errNone
}

// replicate is a follower's fetch loop.
func (b *Broker) replicate(p *partition, f *follower) {
	defer b.wg.Done()
	t := time.NewTicker(b.fetchEvery)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		if f.stopped.Load() {
			continue
		}
		p.mu.Lock()
		target := int64(len(p.log))
		p.mu.Unlock()
		if lag := time.Duration(f.lag.Load()); lag > 0 {
			select {
			case <-b.stop:
				return
			case <-time.After(lag):
			}
		}
		b.followerFetched(p, f, target)
	}
}

// followerFetched records that f has the log up to leo, moves the high
// watermark if it can, and wakes what waits on it.
func (b *Broker) followerFetched(p *partition, f *follower, leo int64) {
	p.mu.Lock()
	if leo > f.leo {
		f.leo = leo
	}
	hw := int64(len(p.log))
	for _, r := range p.followers {
		hw = min(hw, r.leo)
	}
	moved := hw > p.hw
	if moved {
		p.hw = hw
	}
	p.mu.Unlock()
	if moved {
		b.produce.CheckAndComplete(p.key)
		b.fetch.CheckAndComplete(p.key) // consumers reading committed data
	}
}

// Resign makes the broker stop leading tp, as when leadership moves to
// another broker: waiting produces and fetches for it are answered with
// NOT_LEADER_OR_FOLLOWER.
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
}

// SetFollower changes follower id (1-based) of tp: its lag, and whether it
// fetches at all.
func (b *Broker) SetFollower(tp tpKey, id int, lag time.Duration, stopped bool) error {
	p := b.partitions[tp]
	if p == nil || id < 1 || id > len(p.followers) {
		return fmt.Errorf("no follower %d of %v", id, tp)
	}
	f := p.followers[id-1]
	f.lag.Store(int64(lag))
	f.stopped.Store(stopped)
	return nil
}

// state reads what a TryComplete needs, under the partition's lock.
func (p *partition) state() (leader bool, leo, hw int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader, int64(len(p.log)), p.hw
}

// bytesBetween is the size of records [from, to).
func (p *partition) bytesBetween(from, to int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from >= to {
		return 0
	}
	return p.bytes[to] - p.bytes[from]
}

// read returns the records [from, to), at most maxBytes of them (but at
// least one record if there is one).
func (p *partition) read(from, to int64, maxBytes int64) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]byte
	var n int64
	for o := from; o < to && o < int64(len(p.log)); o++ {
		r := p.log[o]
		if len(out) > 0 && n+int64(len(r)) > maxBytes {
			break
		}
		out = append(out, r)
		n += int64(len(r))
	}
	return out
}

// Stats returns the two purgatories' counters.
func (b *Broker) Stats() (produce, fetch purgatory.Stats) {
	return b.produce.Stats(), b.fetch.Stats()
}

// Close stops the followers and shuts both purgatories down, which answers
// every request still waiting (their timeouts fire early), so that nothing
// parked is dropped.
func (b *Broker) Close(ctx context.Context) error {
	var err error
	b.closeOnce.Do(func() {
		close(b.stop)
		b.wg.Wait()
		err = errors.Join(b.produce.Shutdown(ctx), b.fetch.Shutdown(ctx))
	})
	return err
}
