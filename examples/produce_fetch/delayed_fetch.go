package main

import (
	"maps"
	"slices"
	"time"

	"github.com/purgatory-go/purgatory/operation"
)

// DelayedFetch is a consumer fetch parked until at least minBytes are
// readable past its offsets, summed over its partitions, or maxWait passes;
// then it answers with whatever is there. It is Kafka's DelayedFetch. A
// consumer reading committed data sees records below the high watermark; a
// follower or a read-uncommitted consumer sees the whole log.
type DelayedFetch struct {
	operation.Base
	broker    *Broker
	offsets   map[tpKey]int64
	minBytes  int64
	maxBytes  int64
	committed bool
	respond   func(FetchResponse)
	started   time.Time
}

// FetchResponse is the answer to a fetch.
type FetchResponse struct {
	Partitions map[string]FetchPartition `json:"partitions"`
	Expired    bool                      `json:"-"`
	Latency    time.Duration             `json:"-"`
}

// FetchPartition is one partition's records.
type FetchPartition struct {
	Error         string   `json:"error"`
	HighWatermark int64    `json:"high_watermark"`
	Records       []string `json:"records,omitempty"`
	NextOffset    int64    `json:"next_offset"`
}

// NewDelayedFetch makes a fetch of offsets, waiting for minBytes at most
// maxWait.
func NewDelayedFetch(b *Broker, offsets map[tpKey]int64, minBytes, maxBytes int64, maxWait time.Duration, committed bool, respond func(FetchResponse)) *DelayedFetch {
	f := &DelayedFetch{broker: b, offsets: offsets, minBytes: minBytes, maxBytes: maxBytes,
		committed: committed, respond: respond, started: time.Now()}
	f.Init(f, maxWait)
	return f
}

// Keys are the partitions the fetch reads.
func (f *DelayedFetch) Keys() []tpKey {
	return slices.Collect(maps.Keys(f.offsets))
}

// limit is the offset a fetch may read up to.
func (f *DelayedFetch) limit(leo, hw int64) int64 {
	if f.committed {
		return hw
	}
	return leo
}

// TryComplete completes the fetch as soon as it has enough bytes, or at once
// if a partition has an error to report (Kafka's DelayedFetch does the
// same: a changed leader or an offset out of range is worth answering now).
func (f *DelayedFetch) TryComplete() bool {
	var available int64
	for tp, off := range f.offsets {
		p := f.broker.partitions[tp]
		if p == nil {
			return f.ForceComplete()
		}
		leader, leo, hw := p.state()
		if !leader || off > leo {
			return f.ForceComplete()
		}
		available += p.bytesBetween(off, f.limit(leo, hw))
	}
	if available >= f.minBytes {
		return f.ForceComplete()
	}
	return false
}

// OnComplete reads what is there and answers.
func (f *DelayedFetch) OnComplete() {
	resp := FetchResponse{Partitions: make(map[string]FetchPartition, len(f.offsets)),
		Expired: f.IsExpired(), Latency: time.Since(f.started)}
	for tp, off := range f.offsets {
		r := FetchPartition{Error: errNone, NextOffset: off}
		p := f.broker.partitions[tp]
		if p == nil {
			r.Error = errUnknownPartition
			resp.Partitions[tp.String()] = r
			continue
		}
		leader, leo, hw := p.state()
		r.HighWatermark = hw
		switch {
		case !leader:
			r.Error = errNotLeader
		case off > leo:
			r.Error = errOffsetOutOfRange
		default:
			for _, rec := range p.read(off, f.limit(leo, hw), f.maxBytes) {
				r.Records = append(r.Records, string(rec))
			}
			r.NextOffset = off + int64(len(r.Records))
		}
		resp.Partitions[tp.String()] = r
	}
	f.respond(resp)
}

// OnExpiration runs after OnComplete when maxWait passed first.
func (f *DelayedFetch) OnExpiration() {}
