package purgatory_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// The BenchmarkHot... benchmarks are the hot paths, one goroutine each,
// each matched by exactly one -bench pattern ('^BenchmarkHotParkCheck$'),
// so that make icount can count their instructions per iteration and hold
// them to icount.txt. They run on a SystemTimer as a purgatory makes its
// own (1 ms tick, wheel size 256, expiries inline), but on a StepClock,
// which moves only when told: each iteration moves it 500 ns (perf run
// C's two million requests a second), and every 2,000 iterations the
// benchmark advances the timer and purges, as the reaper would once a
// millisecond. Nothing depends on the machine's clock or speed, so the
// counts repeat to a few parts in ten thousand.

const (
	hotStep  = 500 * time.Nanosecond
	hotEvery = 2000 // iterations a millisecond at hotStep
)

type hotBench struct {
	clock *optest.StepClock
	p     *purgatory.Purgatory[string, *benchOp]
	keys  []string
	i     int
}

func newHotBench(b *testing.B) *hotBench {
	b.Helper()
	h := &hotBench{clock: &optest.StepClock{}}
	st, err := timer.NewSystemTimer("hot", timer.WithClock(h.clock),
		timer.WithWheelSize(256), timer.WithExecutors(0))
	if err != nil {
		b.Fatal(err)
	}
	h.p, err = purgatory.New[string, *benchOp]("hot", purgatory.WithTimer(st), purgatory.WithoutReaper())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.p.Shutdown(context.Background()) })
	for i := range 100 {
		h.keys = append(h.keys, "fakeKey"+strconv.Itoa(i))
	}
	return h
}

// tick moves the clock by one iteration's share and, once a millisecond,
// does the reaper's work.
func (h *hotBench) tick() {
	h.clock.Step(hotStep)
	if h.i++; h.i%hotEvery == 0 {
		h.p.AdvanceClock(0)
	}
}

// park parks a new operation with timeout d on three of the hundred keys,
// as perf run C does, and returns it with its keys.
func (h *hotBench) park(b *testing.B, d time.Duration) (*benchOp, []string) {
	o := newBenchOp(d)
	k := h.i % 98
	keys := h.keys[k : k+3]
	if done, err := h.p.TryCompleteElseWatch(o, keys...); done || err != nil {
		b.Fatal("not parked", err)
	}
	return o, keys
}

// BenchmarkHotParkCheck: a park on three keys with a 1 s timeout, then a
// CheckAndComplete of one of them that completes it.
func BenchmarkHotParkCheck(b *testing.B) {
	h := newHotBench(b)
	for b.Loop() {
		o, keys := h.park(b, time.Second)
		o.ready.Store(true)
		if h.p.CheckAndComplete(keys[1]) != 1 {
			b.Fatal("not completed")
		}
		h.tick()
	}
}

// BenchmarkHotParkForce: a park on three keys with a 1 s timeout, then a
// ForceComplete from the user's code, perf run C's completion. Nothing
// checks the keys: the purge drops their tombstones.
func BenchmarkHotParkForce(b *testing.B) {
	h := newHotBench(b)
	for b.Loop() {
		o, _ := h.park(b, time.Second)
		if !o.ForceComplete() {
			b.Fatal("not completed")
		}
		h.tick()
	}
}

// BenchmarkHotParkComplete: BenchmarkHotParkForce with the purgatory's
// Complete, which takes the operation's lock, in place of ForceComplete:
// a hang-up's cost.
func BenchmarkHotParkComplete(b *testing.B) {
	h := newHotBench(b)
	for b.Loop() {
		o, _ := h.park(b, time.Second)
		if !h.p.Complete(o, errHungUp) {
			b.Fatal("not completed")
		}
		h.tick()
	}
}

var errHungUp = errors.New("hung up")

// BenchmarkHotParkExpire: a park on three keys with a 10 ms timeout on a
// MockTimer, and its expiry: every 1,000 iterations the test advances the
// timer by the timeout and purges.
func BenchmarkHotParkExpire(b *testing.B) {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *benchOp]("hot", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	h := &hotBench{p: p, keys: newHotBench(b).keys}
	const batch = 1000
	for b.Loop() {
		h.park(b, 10*time.Millisecond)
		if h.i++; h.i%batch == 0 {
			if n := mt.Advance(10 * time.Millisecond); n != batch {
				b.Fatalf("%d expired, want %d", n, batch)
			}
			p.AdvanceClock(0)
		}
	}
}

// BenchmarkHotReset: a ResetTimeout of one of 1,000 parked operations
// with 10 s timeouts, a session's heartbeat.
func BenchmarkHotReset(b *testing.B) {
	h := newHotBench(b)
	ops := make([]*benchOp, 1000)
	for i := range ops {
		ops[i], _ = h.park(b, 10*time.Second)
	}
	for b.Loop() {
		if !h.p.ResetTimeout(ops[h.i%len(ops)], 10*time.Second) {
			b.Fatal("not reset")
		}
		h.tick()
	}
}

// BenchmarkHotCheckMiss1 and BenchmarkHotCheckMiss100: a CheckAndComplete
// of a key with 1 or 100 watchers, none of which completes.
func BenchmarkHotCheckMiss1(b *testing.B)   { benchCheckMiss(b, 1) }
func BenchmarkHotCheckMiss100(b *testing.B) { benchCheckMiss(b, 100) }

func benchCheckMiss(b *testing.B, n int) {
	h := newHotBench(b)
	for range n {
		o := newBenchOp(time.Hour)
		if _, err := h.p.TryCompleteElseWatch(o, "busy"); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if h.p.CheckAndComplete("busy") != 0 {
			b.Fatal("completed")
		}
	}
}

// BenchmarkHotCheckMiss10000: a CheckAndComplete of a key that 10,000
// operations watch, none of which completes: what a queue's event costs
// when every waiter is tried.
func BenchmarkHotCheckMiss10000(b *testing.B) { benchCheckMiss(b, 10000) }

// BenchmarkHotWakeOne1 and BenchmarkHotWakeOne10000: a round of a queue
// with 1 or 10,000 receivers parked on one key. The oldest can now finish
// and a CheckAndCompleteN(key, 1) completes it; then a new receiver parks
// at the back, so that as many wait in every round. The park is the same
// in both, so the difference between the two is what the waiters behind
// the oldest cost the check: nothing, if it tries the oldest first and
// stops there.
func BenchmarkHotWakeOne1(b *testing.B)     { benchWakeOne(b, 1) }
func BenchmarkHotWakeOne10000(b *testing.B) { benchWakeOne(b, 10000) }

func benchWakeOne(b *testing.B, n int) {
	h := newHotBench(b)
	waiting := make([]*benchOp, 0, n) // in park order: a ring
	park := func() *benchOp {
		o := newBenchOp(time.Hour)
		if done, err := h.p.TryCompleteElseWatch(o, "queue"); done || err != nil {
			b.Fatal("not parked", err)
		}
		return o
	}
	for range n {
		waiting = append(waiting, park())
	}
	for b.Loop() {
		oldest := waiting[h.i%n]
		oldest.ready.Store(true)
		if h.p.CheckAndCompleteN("queue", 1) != 1 || !oldest.IsCompleted() {
			b.Fatal("the oldest was not completed")
		}
		waiting[h.i%n] = park()
		h.tick()
	}
}
