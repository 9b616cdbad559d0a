package lincheck

import (
	"math/rand/v2"
	"testing"
)

// The purgatory's workloads. Each mixes the calls the docs say may race,
// weighted to reach one kind of race often; "mixed" has them all.
//
//	go test -run 'TestPurgatory/mixed' -args -lincheck.duration=1m
func purgatoryWorkloads() []pconfig {
	w := func(kv map[action]int) (ws [nActions]int) {
		for a, n := range kv {
			ws[a] = n
		}
		return ws
	}
	return []pconfig{{
		// Everything at once: parks, checks, forced completions, resets,
		// CompleteForKey, CancelForKey, contexts, levels, shared locks,
		// and two goroutines advancing the clock.
		name: "mixed", workers: 3, steps: 30, advancers: 2, advances: 20, nkeys: 4,
		shared: 0.3, leveled: 0.3, ctxs: 0.3, maxTO: 6, maxReset: 6, targetInFlight: 0.3,
		weights: w(map[action]int{aPark: 6, aRepark: 1, aSatisfy: 4, aCheck: 2, aCheckUpTo: 1, aFC: 2,
			aReset: 3, aCFK: 1, aCancelKey: 1, aCtxCancel: 1, aLocked: 1}),
	}, {
		// The control: everything but resets, second parks, shared locks
		// and a bound, so that none of the defects known at e2a455e can
		// show. A failure here is a new defect, or the model's mistake.
		name: "baseline", workers: 3, steps: 30, advancers: 2, advances: 20, nkeys: 4,
		leveled: 0.3, ctxs: 0.3, maxTO: 6, targetInFlight: 0.3, slowTries: 1,
		weights: w(map[action]int{aPark: 6, aSatisfy: 4, aCheck: 2, aCheckUpTo: 1, aFC: 2,
			aCFK: 1, aCancelKey: 1, aCtxCancel: 1}),
	}, {
		// Resets of operations while they are being parked, with short
		// timeouts and the clock moving (defect 2: a reset's deadline
		// taken late).
		name: "reset", workers: 3, steps: 20, advancers: 2, advances: 20, nkeys: 3,
		maxTO: 3, minReset: 1, maxReset: 2, minAdv: 1, targetInFlight: 0.7, pauseForReset: true,
		weights: w(map[action]int{aPark: 6, aSatisfy: 2, aCheck: 2, aFC: 1, aReset: 6, aCFK: 1, aCancelKey: 1}),
	}, {
		// WithMaxPending 1-3 and parks of operations that are parked, or
		// being parked, already (defect 7: a refused park holds a place).
		name: "maxpending", workers: 4, steps: 15, advancers: 2, advances: 10, nkeys: 3,
		bound: -1, maxTO: 6, maxReset: 6, targetInFlight: 0.6, slowTries: 1,
		weights: w(map[action]int{aPark: 6, aRepark: 4, aSatisfy: 3, aCheck: 3, aFC: 2, aCancelKey: 1, aReset: 1}),
	}, {
		// Operations under SharedLocks: parks deferred by a held lock,
		// forced completions and second parks of them meanwhile (defect
		// 8: what the observer is told around a deferred park).
		name: "sharedlock", workers: 3, steps: 20, advancers: 2, advances: 10, nkeys: 3,
		shared: 1, maxTO: 6, maxReset: 6, targetInFlight: 0.6,
		weights: w(map[action]int{aPark: 4, aRepark: 4, aLocked: 4, aFC: 4, aSatisfy: 2, aCheck: 2, aReset: 1}),
	}, {
		// The same under a WithMaxPending bound of 1-3: a deferred park
		// holds its place from the call that accepted it, and one that a
		// ForceComplete completes before the unlock gives it back then
		// (at e2a455e it kept it until the lock was released, and parks
		// meanwhile got ErrFull with nothing pending).
		name: "sharedbound", workers: 3, steps: 20, advancers: 2, advances: 10, nkeys: 3,
		shared: 1, bound: -1, maxTO: 6, maxReset: 6, targetInFlight: 0.6,
		weights: w(map[action]int{aPark: 4, aRepark: 4, aLocked: 4, aFC: 4, aSatisfy: 2, aCheck: 2, aReset: 1}),
	}}
}

func TestPurgatory(t *testing.T) { runWorkloads(t, purgatoryWorkloads()) }

func runWorkloads(t *testing.T, cfgs []pconfig) {
	for _, cfg := range cfgs {
		t.Run(cfg.name, func(t *testing.T) {
			hunt(t, cfg.name, func(seed uint64, shrink *rand.Rand) []failure {
				c := cfg
				if c.bound < 0 {
					c.bound = 1 + int(seed%3)
				}
				if shrink != nil {
					c.workers = 2 + shrink.IntN(c.workers-1)
					c.steps = 2 + shrink.IntN(c.steps-1)
					c.advances = 1 + shrink.IntN(c.advances)
				}
				h := newPHist(c, seed)
				h.run()
				return h.check()
			})
		})
	}
}
