package main

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/purgatory-go/purgatory/operation"
)

// DelayedFetch is a consumer's or a follower's fetch, parked until at least
// minBytes are readable past its offsets, summed over its partitions, or
// maxWait passes; then it answers with whatever is there. It is Kafka's
// DelayedFetch. A consumer reading committed data sees records below the
// high watermark; a follower or a read-uncommitted consumer sees the whole
// log.
type DelayedFetch struct {
	operation.Base
	broker  *Broker
	req     FetchRequest
	respond func(FetchResponse)
	started time.Time
	refused bool // set before ForceComplete when the purgatory would not take it
}

// FetchResponse is the answer to a fetch.
type FetchResponse struct {
	Partitions []FetchResult // in request order
	Expired    bool          // maxWait passed before minBytes were there
	Refused    bool          // never parked: the broker was closing
	Latency    time.Duration
}

// FetchResult is one partition's part of a fetch response: whole record
// batches, the first of which may start before the fetch offset.
type FetchResult struct {
	TP             tpKey
	Offset         int64       // the fetch offset
	Err            *kerr.Error // nil: NONE
	HighWatermark  int64
	LogStartOffset int64
	Batches        [][]byte
}

// Keys are the partitions the fetch reads.
func (f *DelayedFetch) Keys() []tpKey {
	keys := make([]tpKey, 0, len(f.req.Partitions))
	for _, p := range f.req.Partitions {
		keys = append(keys, p.TP)
	}
	return keys
}

// limit is the offset a fetch may read up to.
func (f *DelayedFetch) limit(s partitionState) int64 {
	if f.req.Committed {
		return s.hw
	}
	return s.leo
}

// partitionMax is how many bytes one partition may contribute.
func (f *DelayedFetch) partitionMax(p FetchPartitionRequest) int64 {
	if p.MaxBytes > 0 {
		return min(p.MaxBytes, f.req.MaxBytes)
	}
	return f.req.MaxBytes
}

// TryComplete completes the fetch as soon as it has enough bytes, or at once
// if a partition has an error to report (Kafka's DelayedFetch does the
// same: a changed leader or an offset out of range is worth answering now).
// As in Kafka, a partition counts for at most its own max bytes.
func (f *DelayedFetch) TryComplete() bool {
	var available int64
	for _, fp := range f.req.Partitions {
		p := f.broker.partitions[fp.TP]
		if p == nil {
			return f.ForceComplete()
		}
		s := p.state()
		if !s.leader || fp.Offset < s.logStart || fp.Offset > s.leo {
			return f.ForceComplete()
		}
		available += min(p.bytesBetween(fp.Offset, f.limit(s)), f.partitionMax(fp))
	}
	if available >= f.req.MinBytes {
		return f.ForceComplete()
	}
	return false
}

// OnComplete reads what is there and answers. The request's MaxBytes bounds
// the whole response, except that the first batch found is returned even if
// it is larger (KIP-74), so that a consumer always makes progress.
func (f *DelayedFetch) OnComplete() {
	resp := FetchResponse{Partitions: make([]FetchResult, 0, len(f.req.Partitions)),
		Expired: f.IsExpired(), Refused: f.refused, Latency: time.Since(f.started)}
	remaining := f.req.MaxBytes
	gotData := false
	for _, fp := range f.req.Partitions {
		r := FetchResult{TP: fp.TP, Offset: fp.Offset, HighWatermark: -1, LogStartOffset: -1}
		p := f.broker.partitions[fp.TP]
		if p == nil {
			r.Err = errUnknownPartition
			resp.Partitions = append(resp.Partitions, r)
			continue
		}
		s := p.state()
		r.HighWatermark, r.LogStartOffset = s.hw, s.logStart
		switch {
		case !s.leader:
			r.Err = errNotLeader
		case fp.Offset < s.logStart || fp.Offset > s.leo:
			// Below the log start: deleted (DeleteRecords), as in Kafka.
			r.Err = errOffsetOutOfRange
		default:
			r.Batches = p.read(fp.Offset, f.limit(s), min(remaining, f.partitionMax(fp)), !gotData)
			for _, b := range r.Batches {
				remaining -= int64(len(b))
				gotData = true
			}
			remaining = max(remaining, 0)
		}
		resp.Partitions = append(resp.Partitions, r)
	}
	f.respond(resp)
}

// OnExpiration runs after OnComplete when maxWait passed first.
func (f *DelayedFetch) OnExpiration() {}
