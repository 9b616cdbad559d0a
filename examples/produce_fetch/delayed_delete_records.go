package main

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/purgatory-go/purgatory/operation"
)

// DeleteRecords moves partitions' log start offsets forward, and waits in
// the third purgatory of Kafka's ReplicaManager until every replica has
// moved its own: Kafka's DelayedDeleteRecords (KIP-107). The leader
// deletes at once; the request is done when the partition's low watermark,
// the smallest log start offset over its replicas (lowWatermarkLocked),
// reaches the offset asked for. Followers learn the leader's log start
// from their fetches' answers and report their own in their next fetches
// (replicate, followerFetch), which moves the low watermark.

// DeleteRecordsPartition is one partition's part of a DeleteRecords
// request: delete the records below Offset. An Offset of -1 means the
// high watermark, as in Kafka: everything committed.
type DeleteRecordsPartition struct {
	TP     tpKey
	Offset int64
}

// DeleteRecordsRequest deletes records from partitions, waiting up to
// Timeout for every replica to follow.
type DeleteRecordsRequest struct {
	Partitions []DeleteRecordsPartition // each partition at most once
	Timeout    time.Duration
}

// DeleteRecordsResponse is the answer to a DeleteRecords request.
type DeleteRecordsResponse struct {
	Partitions []DeleteRecordsResult // in request order
	Expired    bool                  // the timeout completed it
	Refused    bool                  // never parked: the broker was closing
}

// DeleteRecordsResult is one partition's part of a DeleteRecords
// response. LowWatermark is the partition's low watermark when it was
// settled (at or past the offset asked for, on success; what it was when
// the leader deleted, on REQUEST_TIMED_OUT), or -1 on any other error.
type DeleteRecordsResult struct {
	TP           tpKey
	Err          *kerr.Error // nil: NONE
	Message      string
	LowWatermark int64
}

// DelayedDeleteRecords is a DeleteRecords request parked until each of its
// partitions' low watermarks reaches the offset the request deleted up to,
// or its timeout passes. As for DelayedProduce, each partition is answered
// with its own error: those whose replicas did not all follow in time get
// REQUEST_TIMED_OUT.
type DelayedDeleteRecords struct {
	operation.Base
	broker *Broker
	// status is guarded by the operation's lock: TryComplete and the
	// callbacks run under it.
	status  []*deleteStatus
	respond func(DeleteRecordsResponse)
	refused bool // set before ForceComplete when the purgatory would not take it
}

// deleteStatus is one partition's part of a DeleteRecords: required is
// the new log start offset (-1 resolved to the high watermark).
type deleteStatus struct {
	partWait
	lw int64 // the low watermark when last seen
}

func (s *deleteStatus) settle(e *kerr.Error, msg string) {
	s.partWait.settle(e, msg)
	if e != nil {
		s.lw = -1
	}
}

// DeleteRecordsFunc deletes the records and calls respond once with the
// answer: at once if every partition is done or failed, or once the
// replicas have followed or the timeout passes (Kafka's
// ReplicaManager.deleteRecords). respond may run on another goroutine
// (a follower's, the reaper's), under the operation's lock: it must not
// block.
func (b *Broker) DeleteRecordsFunc(req DeleteRecordsRequest, respond func(DeleteRecordsResponse)) {
	d := &DelayedDeleteRecords{broker: b, respond: respond}
	closing := b.closed.Load()
	waiting := false
	for _, dp := range req.Partitions {
		st := &deleteStatus{partWait: partWait{tp: dp.TP}}
		d.status = append(d.status, st)
		if closing {
			st.settle(errBrokerClosing, "the broker is shutting down")
			continue
		}
		required, lw, e, msg := b.deleteBefore(dp.TP, dp.Offset)
		st.required, st.lw = required, lw
		switch {
		case e != nil:
			st.settle(e, msg)
		case lw >= required:
			st.settle(nil, "") // no follower to wait for, or all are there
		default:
			waiting = true
		}
	}
	d.Init(d, req.Timeout)
	d.refused = closing
	if !waiting {
		d.ForceComplete()
		return
	}
	if _, err := b.deleteRecords.TryCompleteElseWatch(d, d.Keys()...); err != nil {
		// Refused: the broker is closing. The leader has deleted, but no
		// follower will report now.
		for _, st := range d.status {
			if !st.settled {
				st.settle(errBrokerClosing, "the broker is shutting down")
			}
		}
		d.refused = true
		d.ForceComplete()
	}
}

// DeleteRecords is DeleteRecordsFunc answering on a channel.
func (b *Broker) DeleteRecords(req DeleteRecordsRequest) <-chan DeleteRecordsResponse {
	out := make(chan DeleteRecordsResponse, 1)
	b.DeleteRecordsFunc(req, func(r DeleteRecordsResponse) { out <- r })
	return out
}

// deleteBefore is the leader's part of a DeleteRecords on one partition
// (Kafka's Partition.deleteRecordsOnLeader): it moves the log start offset
// up to offset, resolving -1 to the high watermark, and returns that
// offset and the low watermark after the move. An offset past the high
// watermark is OFFSET_OUT_OF_RANGE: uncommitted records cannot be deleted.
func (b *Broker) deleteBefore(tp tpKey, offset int64) (required, lw int64, e *kerr.Error, msg string) {
	p := b.partitions[tp]
	if p == nil {
		return 0, -1, errUnknownPartition, ""
	}
	p.mu.Lock()
	if !p.leader {
		p.mu.Unlock()
		return 0, -1, errNotLeader, ""
	}
	if offset == -1 {
		offset = p.hw
	}
	if offset < 0 || offset > p.hw {
		hw := p.hw
		p.mu.Unlock()
		return 0, -1, errOffsetOutOfRange, fmt.Sprintf("cannot delete below offset %d: the high watermark is %d", offset, hw)
	}
	startBefore, lwBefore := p.log.Start(), p.lowWatermarkLocked()
	p.log.DeleteBefore(offset)
	started := p.log.Start() > startBefore
	lw = p.lowWatermarkLocked()
	p.mu.Unlock()
	// With the partition's lock released, as for a high watermark move: a
	// consumer's fetch parked below the new log start is now out of range,
	// and with no followers the low watermark is the leader's log start.
	if started {
		b.fetch.CheckAndComplete(tp)
	}
	if lw > lwBefore {
		b.deleteRecords.CheckAndCompleteUpTo(tp, lw)
	}
	return offset, lw, nil, ""
}

// WatchLevel is the low watermark the request waits for on tp: it is
// watched at that level, and a move of tp's low watermark
// (followerFetch's CheckAndCompleteUpTo) tries only the requests it
// reached (purgatory.Leveled), as the produces on the high watermark.
func (d *DelayedDeleteRecords) WatchLevel(tp tpKey) int64 { return watchLevel(d.status, tp) }

// Keys are the partitions the request waits on.
func (d *DelayedDeleteRecords) Keys() []tpKey { return unsettled(d.status) }

// TryComplete settles each partition whose low watermark has reached its
// offset (NONE) or that the broker no longer leads (NOT_LEADER_OR_FOLLOWER),
// and completes the request once all are settled. As DelayedProduce's, it
// runs under the operation's lock and takes each partition's in turn.
func (d *DelayedDeleteRecords) TryComplete() bool {
	waiting := false
	for _, st := range d.status {
		if st.settled {
			continue
		}
		s := d.broker.partitions[st.tp].state()
		switch {
		case !s.leader:
			st.settle(errNotLeader, "")
		case s.lw >= st.required:
			st.lw = s.lw
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

// OnComplete answers the request. Partitions not settled by now timed out:
// they answer REQUEST_TIMED_OUT with the low watermark as it was when the
// leader deleted, as Kafka does.
func (d *DelayedDeleteRecords) OnComplete() {
	resp := DeleteRecordsResponse{Partitions: make([]DeleteRecordsResult, 0, len(d.status)),
		Expired: d.IsExpired(), Refused: d.refused}
	for _, st := range d.status {
		r := DeleteRecordsResult{TP: st.tp, Err: st.err, Message: st.msg, LowWatermark: st.lw}
		if !st.settled {
			r.Err = errRequestTimedOut
		}
		resp.Partitions = append(resp.Partitions, r)
	}
	d.respond(resp)
}

// OnExpiration runs after OnComplete when the timeout won; the
// purgatory's Stats count it.
func (d *DelayedDeleteRecords) OnExpiration() {}
