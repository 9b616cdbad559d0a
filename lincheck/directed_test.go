package lincheck

import (
	"runtime"
	"testing"
	"time"
)

// TestResetDuringParkDirected drives defect 2's interleaving on purpose,
// once, and checks the history as the random workloads do: a park whose
// TryComplete is held (under the operation's lock), a ResetTimeout of the
// operation that returns true meanwhile, then an Advance past the reset's
// deadline, begun after the reset returned; the park is let go once the
// Advance has had time to fire the timeout. The docs say the reset's
// deadline is now+timeout on the timer's clock inside the reset's call,
// so that Advance must expire the operation.
//
// If the Advance has not fired the entry when the park goes on (a slow
// machine), the history is an ordinary one and passes: the pause is no
// assertion.
func TestResetDuringParkDirected(t *testing.T) {
	cfg := pconfig{name: "directed", workers: 1, steps: 1, advancers: 1, advances: 1, nkeys: 1, maxTO: 3}
	h := newPHist(cfg, 1)
	h.calls = make([][]rcall, 4)
	o := h.ops[0]
	parker, resetter, advancer, main := &worker{id: 0}, &worker{id: 1}, &worker{id: 2}, &worker{id: 3}
	entered, gate := make(chan struct{}), make(chan struct{})
	blockTry = func(x *top) {
		if x == o {
			close(entered)
			<-gate
		}
	}
	defer func() { blockTry = nil }()
	parked := make(chan struct{})
	go func() {
		defer close(parked)
		h.workers.register(parker)
		h.park(parker, o.id)
	}()
	<-entered
	h.workers.register(resetter)
	r := rcall{kind: evReset, op: o.id, d: 1}
	r.call = h.begin(resetter)
	r.ok = h.p.ResetTimeout(h.dops[o.id], 1)
	r.ret = h.end(resetter)
	h.record(resetter, r)
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		h.workers.register(advancer)
		h.advanceBy(advancer, 2)
	}()
	// Give the Advance time to fire the timeout and wait for the lock.
	for range 100 {
		runtime.Gosched()
	}
	time.Sleep(10 * time.Millisecond)
	close(gate)
	<-parked
	<-advanced
	h.settled = true
	h.workers.register(main)
	h.finish(main)
	for _, f := range h.check() {
		t.Errorf("%s\n%s", f.kind, f.text)
	}
}
