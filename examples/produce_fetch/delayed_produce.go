package main

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

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
	status  []*produceStatus
	respond func(ProduceResponse)
	started time.Time
	// refused is set, before ForceComplete, on a request that the produce
	// purgatory would not take because the broker is closing.
	refused bool
}

// produceStatus is one partition's part of a produce: required is the
// offset after this request's records.
type produceStatus struct {
	partWait
	base int64 // base offset the batch was given
}

// ProduceResponse is the answer to a produce request.
type ProduceResponse struct {
	Partitions []PartitionResult // in request order
	Expired    bool              // the timeout completed it
	Refused    bool              // never parked: the broker was closing
	Latency    time.Duration
}

// PartitionResult is one partition's part of a produce response.
type PartitionResult struct {
	TP         tpKey
	Err        *kerr.Error // nil: NONE
	Message    string
	BaseOffset int64 // offset of the first record written
	Offset     int64 // offset after the last one
}

// WatchLevel is the high watermark the request waits for on tp: the offset
// after its records there. It makes the produce purgatory's checks on a
// high watermark move (CheckAndCompleteUpTo) try only the requests that
// move reached, not every request waiting on the partition
// (purgatory.Leveled). A request over several partitions is tried when
// each of its partitions reaches its level, and completes at the last.
func (d *DelayedProduce) WatchLevel(tp tpKey) int64 { return watchLevel(d.status, tp) }

// Keys are the partitions the request waits on.
func (d *DelayedProduce) Keys() []tpKey { return unsettled(d.status) }

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
	for _, st := range d.status {
		if st.settled {
			continue
		}
		s := d.broker.partitions[st.tp].state()
		switch {
		case !s.leader:
			st.settle(errNotLeader, "")
		case s.hw >= st.required:
			st.settle(nil, "")
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
	resp := ProduceResponse{Partitions: make([]PartitionResult, 0, len(d.status)),
		Expired: d.IsExpired(), Refused: d.refused, Latency: time.Since(d.started)}
	for _, st := range d.status {
		r := PartitionResult{TP: st.tp, Err: st.err, Message: st.msg, BaseOffset: -1, Offset: -1}
		if !st.settled {
			r.Err = errRequestTimedOut
		}
		if r.Err == nil {
			r.BaseOffset, r.Offset = st.base, st.required
		}
		resp.Partitions = append(resp.Partitions, r)
	}
	d.respond(resp)
}

// OnExpiration runs after OnComplete when the timeout won; Kafka counts it
// in its ExpiresPerSec metric. The purgatory's Stats count it already.
func (d *DelayedProduce) OnExpiration() {}
