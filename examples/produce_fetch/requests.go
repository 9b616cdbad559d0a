package main

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
)

// The two requests both front ends (HTTP and Kafka's protocol) turn into.
// Everything about parking and completing them lives here and in the two
// operations, so the front ends only translate.

// ProducePartition is one partition's part of a produce request: exactly
// one record batch (Kafka's format v2).
type ProducePartition struct {
	TP    tpKey
	Batch []byte
}

// ProduceRequest writes record batches to partitions. Acks is -1 (all
// in-sync replicas: the request waits in the produce purgatory), or 0 or 1
// (the leader alone: answered at once).
type ProduceRequest struct {
	Partitions []ProducePartition // each partition at most once
	Acks       int
	Timeout    time.Duration
	// Ctx, if set, is the request's context: the parent of its wait's span
	// (-trace), and, should it end, the end of the wait.
	Ctx context.Context
}

// ProduceFunc appends the batches and calls respond once with the answer:
// at once for acks 0 and 1, and for acks=all when every partition is
// replicated, has failed, or the timeout passes. respond may run on another
// goroutine (a follower's, the reaper's), under the operation's lock: it
// must not block.
func (b *Broker) ProduceFunc(req ProduceRequest, respond func(ProduceResponse)) {
	d := &DelayedProduce{broker: b, respond: respond, started: time.Now()}
	closing := b.closed.Load()
	waiting := false
	for _, pp := range req.Partitions {
		st := &produceStatus{partWait: partWait{tp: pp.TP}}
		d.status = append(d.status, st)
		switch {
		case b.partitions[pp.TP] == nil:
			st.settle(errUnknownPartition, "")
		case closing:
			st.settle(errBrokerClosing, "the broker is shutting down")
		case req.Acks != -1 && req.Acks != 0 && req.Acks != 1:
			st.settle(kerr.InvalidRequiredAcks, "")
		default:
			rb, e, msg := partlog.ParseBatch(pp.Batch)
			if e != nil {
				st.settle(e, msg)
				continue
			}
			base, end, e := b.Append(pp.TP, pp.Batch, rb.NumRecords)
			if e != nil {
				st.settle(e, "")
				continue
			}
			st.base, st.required = base, end
			waiting = true
		}
	}
	d.Init(d, req.Timeout, withContext(req.Ctx)...)
	d.refused = closing
	if req.Acks != -1 || !waiting {
		// Nothing to wait for: answer with the leader's offsets.
		for _, st := range d.status {
			if !st.settled {
				st.settle(nil, "")
			}
		}
		d.ForceComplete()
		return
	}
	if _, err := b.produce.TryCompleteElseWatch(d, d.Keys()...); err != nil {
		// Only a closing broker refuses (ErrShutdown). The records are in
		// the log, but no replica will acknowledge them now.
		for _, st := range d.status {
			if !st.settled {
				st.settle(errBrokerClosing, "the broker is shutting down")
			}
		}
		d.refused = true
		d.ForceComplete()
	}
}

// Produce is ProduceFunc answering on a channel.
func (b *Broker) Produce(req ProduceRequest) <-chan ProduceResponse {
	out := make(chan ProduceResponse, 1)
	b.ProduceFunc(req, func(r ProduceResponse) { out <- r })
	return out
}

// FetchPartitionRequest is one partition's part of a fetch.
type FetchPartitionRequest struct {
	TP       tpKey
	Offset   int64
	MaxBytes int64 // at most this much of the partition; 0: the request's MaxBytes
	// LogStartOffset is a follower's log start offset, which its fetch
	// reports to the leader; a consumer's is ignored.
	LogStartOffset int64
}

// FetchRequest reads from offsets, waiting up to MaxWait for MinBytes.
type FetchRequest struct {
	Partitions []FetchPartitionRequest // each partition at most once
	MinBytes   int64
	MaxBytes   int64 // for the whole response; <= 0: 1 MiB
	MaxWait    time.Duration
	Committed  bool // read only below the high watermark, as consumers do
	// ReplicaID is Kafka's replica id: 0 for a consumer, or the id of a
	// follower of every partition read (1..Replicas). A follower fetches
	// from its log end offset, so its fetch also tells the leader that.
	ReplicaID int
}

// FetchFunc parks a fetch and returns it, so that a caller who gives up (a
// client that went away) can complete it early with ForceComplete instead
// of leaving it parked until its timeout. respond is called once, as for
// ProduceFunc.
func (b *Broker) FetchFunc(req FetchRequest, respond func(FetchResponse)) *DelayedFetch {
	if req.MaxBytes <= 0 {
		req.MaxBytes = 1 << 20
	}
	f := &DelayedFetch{broker: b, req: req, respond: respond, started: time.Now()}
	if req.ReplicaID > 0 {
		// As Kafka's ReplicaManager.fetchMessages does, record the
		// follower's log end offset before reading for it: that may move
		// the high watermark and complete acks=all produces.
		for _, fp := range req.Partitions {
			if p := b.partitions[fp.TP]; p != nil && req.ReplicaID <= len(p.followers) {
				b.followerFetch(p, p.followers[req.ReplicaID-1], fp.Offset, fp.LogStartOffset, f.started)
			}
		}
	} else {
		b.consumerFetches.Add(1)
		f.respond = func(r FetchResponse) {
			b.consumerFetches.Add(-1)
			respond(r)
		}
	}
	f.Init(f, req.MaxWait)
	if len(req.Partitions) == 0 {
		f.ForceComplete()
		return f
	}
	if _, err := b.fetch.TryCompleteElseWatch(f, f.Keys()...); err != nil {
		// Not parked (the broker is closing): answer with what is there.
		f.refused = true
		f.ForceComplete()
	}
	return f
}

// Fetch is FetchFunc answering on a channel.
func (b *Broker) Fetch(req FetchRequest) (<-chan FetchResponse, *DelayedFetch) {
	out := make(chan FetchResponse, 1)
	f := b.FetchFunc(req, func(r FetchResponse) { out <- r })
	return out, f
}
