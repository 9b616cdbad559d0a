package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// naive is the reference the figures are compared with: what one writes
// without a purgatory library. One mutex guards a map from key to a slice of
// operations; each operation has its own time.AfterFunc; completed
// operations are swept from the slices every 1000 completions, as Kafka's
// purge does.
type naive struct {
	mu        sync.Mutex
	watchers  map[string][]*naiveOp
	completed int // since the last sweep, guarded by mu
	pend      atomic.Int64
}

type naiveOp struct {
	mu        sync.Mutex
	completed atomic.Bool
	timer     atomic.Pointer[time.Timer]
	req       request
	p         *naive
}

func newNaive() *naive { return &naive{watchers: make(map[string][]*naiveOp)} }

func (o *naiveOp) tryComplete() bool {
	if now() >= o.req.completesAt {
		return o.forceComplete()
	}
	return false
}

func (o *naiveOp) forceComplete() bool { return o.complete(false) }

// complete completes the request if nobody has; expiring says whether the
// caller is its timeout.
func (o *naiveOp) complete(expiring bool) bool {
	if !o.completed.CompareAndSwap(false, true) {
		return false
	}
	if t := o.timer.Load(); t != nil {
		t.Stop()
	}
	o.p.pend.Add(-1)
	track.onComplete(expiring)
	o.p.noteCompleted()
	return true
}

func (o *naiveOp) expire() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.complete(true) {
		track.onExpire(&o.req)
	}
}

func (p *naive) park(req request, keys []string) (*naiveOp, bool, error) {
	o := &naiveOp{req: req, p: p}
	p.pend.Add(1)
	o.mu.Lock()
	if o.tryComplete() {
		o.mu.Unlock()
		return o, false, nil
	}
	p.mu.Lock()
	for _, k := range keys {
		p.watchers[k] = append(p.watchers[k], o)
	}
	p.mu.Unlock()
	done := o.tryComplete()
	if !done {
		o.timer.Store(time.AfterFunc(track.timeout, o.expire))
	}
	o.mu.Unlock()
	return o, !done, nil
}

func (p *naive) noteCompleted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.completed++
	if p.completed < 1000 {
		return
	}
	p.completed = 0
	for k, ops := range p.watchers {
		live := ops[:0]
		for _, o := range ops {
			if !o.completed.Load() {
				live = append(live, o)
			}
		}
		clear(ops[len(live):])
		if len(live) == 0 {
			delete(p.watchers, k)
		} else {
			p.watchers[k] = live
		}
	}
}

func (p *naive) pending() int { return int(p.pend.Load()) }

func (p *naive) shutdown() {}
