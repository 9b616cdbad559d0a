package main

import (
	"maps"
	"slices"
	"time"

	"github.com/purgatory-go/purgatory/operation"
)

// DelayedProduce is a produce request with acks=all, parked until every
// partition's in-sync replicas have its records (the high watermark reaches
// the offset after them) or its timeout passes. It is Kafka's
// DelayedProduce: each partition's answer carries its own error.
type DelayedProduce struct {
	operation.Base
	broker *Broker
	// status is guarded by the operation's lock: TryComplete and the
	// callbacks run under it.
	status  map[tpKey]*produceStatus
	respond func(ProduceResponse)
	started time.Time
}

type produceStatus struct {
	required int64  // the offset after this request's records
	err      string // set once this partition is settled; "" while waiting
}

// ProduceResponse is the answer to a produce request.
type ProduceResponse struct {
	Partitions map[string]PartitionResult `json:"partitions"`
	Expired    bool                       `json:"-"`
	Latency    time.Duration              `json:"-"`
}

// PartitionResult is one partition's part of a response.
type PartitionResult struct {
	Error  string `json:"error"`
	Offset int64  `json:"offset,omitempty"`
}

// NewDelayedProduce makes the operation for records already appended: for
// each partition, required is the leader's log end offset after the append,
// or the append's error. respond is called once, with the answer.
func NewDelayedProduce(b *Broker, timeout time.Duration, required map[tpKey]int64, appendErr map[tpKey]string, respond func(ProduceResponse)) *DelayedProduce {
	d := &DelayedProduce{broker: b, status: make(map[tpKey]*produceStatus), respond: respond, started: time.Now()}
	for tp, off := range required {
		d.status[tp] = &produceStatus{required: off}
	}
	for tp, e := range appendErr {
		d.status[tp] = &produceStatus{err: e}
	}
	d.Init(d, timeout)
	return d
}

// Keys are the partitions the request waits on.
func (d *DelayedProduce) Keys() []tpKey {
	return slices.Collect(maps.Keys(d.status))
}

// TryComplete settles each partition that can be settled: its high
// watermark has reached the required offset (NONE), or the broker no longer
// leads it (NOT_LEADER_OR_FOLLOWER). When every partition is settled the
// request completes. It runs under the operation's lock and takes each
// partition's lock in turn, never the other way round.
//
// Every partition is examined on every check, as in Kafka, not just up to
// the first that is still waiting: a partition settled now must say so even
// if another one later times out.
func (d *DelayedProduce) TryComplete() bool {
	waiting := false
	for tp, st := range d.status {
		if st.err != "" {
			continue
		}
		p := d.broker.partitions[tp]
		leader, _, hw := p.state()
		switch {
		case !leader:
			st.err = errNotLeader
		case hw >= st.required:
			st.err = errNone
		default:
			waiting = true
		}
	}
	if waiting {
		return false
	}
	return d.ForceComplete()
}

// OnComplete answers the request. Partitions not settled by now timed out.
func (d *DelayedProduce) OnComplete() {
	resp := ProduceResponse{Partitions: make(map[string]PartitionResult, len(d.status)),
		Expired: d.IsExpired(), Latency: time.Since(d.started)}
	for tp, st := range d.status {
		r := PartitionResult{Error: st.err}
		if r.Error == "" {
			r.Error = errRequestTimedOut
		}
		if r.Error == errNone {
			r.Offset = st.required
		}
		resp.Partitions[tp.String()] = r
	}
	d.respond(resp)
}

// OnExpiration runs after OnComplete when the timeout won; Kafka counts it
// in its ExpiresPerSec metric. The purgatory's Stats count it already.
func (d *DelayedProduce) OnExpiration() {}
