package main

import (
	"errors"
	"time"

	"github.com/purgatory-go/purgatory/purgatory"
)

// ProduceRequest writes records to partitions. Acks is -1 (all in-sync
// replicas: the request waits in the produce purgatory), or 0 or 1 (the
// leader alone: answered at once).
type ProduceRequest struct {
	Records map[tpKey][][]byte
	Acks    int
	Timeout time.Duration
}

// Produce appends the records and returns a channel that receives the
// answer once: at once for acks 0 and 1, and for acks=all when every
// partition is replicated, has failed, or the timeout passes.
func (b *Broker) Produce(req ProduceRequest) <-chan ProduceResponse {
	out := make(chan ProduceResponse, 1)
	required := make(map[tpKey]int64, len(req.Records))
	appendErr := make(map[tpKey]string)
	for tp, recs := range req.Records {
		if end, e := b.Append(tp, recs); e != errNone {
			appendErr[tp] = e
		} else {
			required[tp] = end
		}
	}
	respond := func(r ProduceResponse) { out <- r }
	d := NewDelayedProduce(b, req.Timeout, required, appendErr, respond)
	if req.Acks != -1 || len(required) == 0 {
		// Nothing to wait for: answer with the leader's offsets.
		for tp := range required {
			d.status[tp].err = errNone
		}
		d.ForceComplete()
		return out
	}
	if _, err := b.produce.TryCompleteElseWatch(d, d.Keys()...); err != nil {
		b.refuse(d, err)
	}
	return out
}

// FetchRequest reads from offsets, waiting up to MaxWait for MinBytes.
type FetchRequest struct {
	Offsets   map[tpKey]int64
	MinBytes  int64
	MaxBytes  int64
	MaxWait   time.Duration
	Committed bool // read only below the high watermark, as consumers do
}

// Fetch returns a channel that receives the answer once, and the operation,
// so that a caller who gives up (a client that went away) can complete it
// early with ForceComplete instead of leaving it parked until its timeout.
func (b *Broker) Fetch(req FetchRequest) (<-chan FetchResponse, *DelayedFetch) {
	out := make(chan FetchResponse, 1)
	if req.MaxBytes <= 0 {
		req.MaxBytes = 1 << 20
	}
	f := NewDelayedFetch(b, req.Offsets, req.MinBytes, req.MaxBytes, req.MaxWait, req.Committed,
		func(r FetchResponse) { out <- r })
	if _, err := b.fetch.TryCompleteElseWatch(f, f.Keys()...); err != nil {
		f.ForceComplete() // not parked (the broker is closing): answer with what is there
	}
	return out, f
}

// refuse answers a produce the purgatory would not take: after shutdown
// every partition gets BROKER_NOT_AVAILABLE.
func (b *Broker) refuse(d *DelayedProduce, err error) {
	code := errInvalidRequest
	if errors.Is(err, purgatory.ErrShutdown) {
		code = errBrokerShuttingDwn
	}
	for _, st := range d.status {
		if st.err == "" {
			st.err = code
		}
	}
	d.ForceComplete()
}
