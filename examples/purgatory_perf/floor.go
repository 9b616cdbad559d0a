package main

import (
	"sync/atomic"
	"time"
)

// floor is not a purgatory: it does only what the workload asks of any
// implementation, so that its figures bound what one could reach on this
// tool. Each request is checked twice, as TryCompleteElseWatch does, and
// completed by the completion queue; no key is watched. It knows each
// request's latency in advance, which no purgatory can, and so gives a
// timeout (a runtime timer) only to the requests that will expire. C's
// requests all complete early, so in C it sets no timer at all.
type floor struct{ pend atomic.Int64 }

type floorOp struct {
	completed atomic.Bool
	req       request
	p         *floor
}

func (o *floorOp) tryComplete() bool {
	if now() >= o.req.completesAt {
		return o.forceComplete()
	}
	return false
}

func (o *floorOp) forceComplete() bool { return o.complete(false) }

func (o *floorOp) complete(expiring bool) bool {
	if !o.completed.CompareAndSwap(false, true) {
		return false
	}
	o.p.pend.Add(-1)
	track.onComplete(expiring)
	return true
}

func (o *floorOp) expire() {
	if o.complete(true) {
		track.onExpire(&o.req)
	}
}

func (p *floor) park(req request, keys []string) (*floorOp, bool, error) {
	o := &floorOp{req: req, p: p}
	p.pend.Add(1)
	for range 2 { // a purgatory checks before it watches and again after
		if o.tryComplete() {
			return o, false, nil
		}
	}
	if req.completesAt-req.arrival >= track.timeout {
		time.AfterFunc(track.timeout, o.expire) // never completed early: never stopped
	}
	return o, true, nil
}

func (p *floor) pending() int { return int(p.pend.Load()) }

func (p *floor) shutdown() {}
