package purgatory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// exactlyOnceStorm parks n operations, with short timeouts, on random
// keys of a set of nkeys, from one goroutine, while actors goroutines
// each call act with a random operation already offered, until every
// operation has left. Then it checks that every OnComplete ran once and
// OnExpiration at most once, only where expiry won, and that the gauges
// drained, and returns the purgatory and its operations for the caller's
// own checks.
func exactlyOnceStorm(t *testing.T, n, nkeys, actors int,
	act func(p *pg, r *rand.Rand, actor int, op *mockOp, keys []string)) (*pg, []*mockOp) {
	t.Helper()
	p, err := purgatory.New[string, *mockOp]("storm",
		purgatory.WithPurgeInterval(100),
		purgatory.WithTimerOptions(timer.WithTick(200*time.Microsecond)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

	key := func(i int) string { return fmt.Sprintf("k%d", i) }
	ops := make([]*mockOp, n)
	opKeys := make([][]string, n)
	for i := range ops {
		ops[i] = newOp(time.Duration(1+rand.IntN(30)) * time.Millisecond)
		for range 1 + rand.IntN(3) {
			opKeys[i] = append(opKeys[i], key(rand.IntN(nkeys)))
		}
	}
	var parked atomic.Int64 // operations [0, parked) have been offered
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the parker
		defer wg.Done()
		for i := range ops {
			_, err := p.TryCompleteElseWatch(ops[i], opKeys[i]...)
			assert.NoError(t, err)
			parked.Store(int64(i + 1))
		}
	}()
	stop := make(chan struct{})
	for g := range actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if m := parked.Load(); m > 0 {
					i := r.IntN(int(m))
					act(p, r, g, ops[i], opKeys[i])
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return parked.Load() == int64(n) && p.NumDelayed() == 0 },
		2*time.Minute, time.Millisecond)
	close(stop)
	wg.Wait()
	for i := range nkeys {
		p.CheckAndComplete(key(i))
	}
	assert.Equal(t, 0, p.Watched())
	var expired uint64
	for i, o := range ops {
		require.Equal(t, int32(1), o.Completes.Load(), "operation %d: OnComplete count", i)
		e := o.Expiries.Load()
		require.LessOrEqual(t, e, int32(1))
		require.Equal(t, o.IsExpired(), e == 1, "operation %d: OnExpiration only where expiry won", i)
		expired += uint64(e)
	}
	assert.Equal(t, expired, p.Stats().Expired)
	return p, ops
}

// Exactly-once storm: many operations on random keys with short timeouts,
// while goroutines mark them completable and check their keys, and others
// force-complete them directly. Every OnComplete runs once; OnExpiration
// runs at most once and only where expiry won; the gauges drain to zero.
func TestExactlyOnceStorm(t *testing.T) {
	const n = 20000
	p, _ := exactlyOnceStorm(t, n, 64, 3, func(p *pg, r *rand.Rand, actor int, op *mockOp, keys []string) {
		if actor == 0 { // the forcer
			op.ForceComplete()
			return
		}
		op.Ready.Store(true)
		p.CheckAndComplete(keys[r.IntN(len(keys))])
	})
	s := p.Stats()
	assert.Equal(t, uint64(n), s.CompletedEarly+s.Expired)
	t.Logf("stats: %+v", s)
}

// No-lost-wake-up storm: each operation is made completable, and one of
// its keys checked, by another goroutine at a random moment around the
// window where a check cannot find it: after its first TryComplete, before
// or while it is watched. The parker signals the end of the first
// TryComplete and waits a random while before watching; the waker waits a
// random while after the signal. The timer never advances, so an
// operation that both its own tries and the check missed would stay
// pending: every one must have completed by the time the parks and checks
// return. It drives TryCompleteElseWatch's skipped last try
// (watchers.Marks) with the two goroutines truly racing, where the seam
// tests run the check at each step in turn.
func TestNoLostWakeUpStorm(t *testing.T) {
	const (
		n    = 5000
		busy = 400 // most iterations either side waits
	)
	p, mt := newMockPurgatory(t)
	// Keys of its own for each operation: a check of a key shared with
	// later operations would complete an earlier one that a wake-up had
	// missed, and hide the miss.
	ops := make([]*mockOp, n)
	opKeys := make([][]string, n)
	for i := range ops {
		ops[i] = newOp(time.Hour)
		for j := range 1 + rand.IntN(3) {
			opKeys[i] = append(opKeys[i], fmt.Sprintf("%d/%d", i, j))
		}
	}
	var tried atomic.Int64 // operations [0, tried) are past their first TryComplete
	var sink atomic.Int64
	spin := func(r *rand.Rand) {
		s := int64(0)
		for j := range r.IntN(busy) {
			s += int64(j)
		}
		sink.Add(s)
	}
	rp := rand.New(rand.NewPCG(1, 11))
	defer purgatory.SetStepHook(p, func(s purgatory.Step) {
		if s == purgatory.StepTried {
			tried.Add(1)
			spin(rp)
		}
	})()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the parker
		defer wg.Done()
		for i := range ops {
			done, err := p.TryCompleteElseWatch(ops[i], opKeys[i]...)
			assert.NoError(t, err)
			if done { // completed by its first try: no StepTried
				tried.Add(1)
			}
		}
	}()
	go func() { // the waker
		defer wg.Done()
		r := rand.New(rand.NewPCG(2, 11))
		for i := range ops {
			for spins := 0; tried.Load() <= int64(i); spins++ {
				if spins%1000 == 999 {
					runtime.Gosched() // with one processor, let the parker run
				}
			}
			spin(r)
			ops[i].Ready.Store(true)
			ks := opKeys[i]
			p.CheckAndComplete(ks[r.IntN(len(ks))])
		}
	}()
	wg.Wait()
	var lost []int
	for i, o := range ops {
		if o.Completes.Load() != 1 {
			lost = append(lost, i)
		}
	}
	require.Empty(t, lost, "operations made completable and checked, but still pending")
	assert.Equal(t, 0, p.NumDelayed())
	assert.Equal(t, 0, p.Watched())
	assert.Equal(t, 0, mt.Size())
	assert.Equal(t, uint64(n), p.Stats().CompletedEarly)
}

// The same storm with sessions being kept alive and keys answered: one
// goroutine resets random operations' timeouts (a heartbeat), another
// completes everything on a random key with a cause, while the checker
// and the forcer run and the reaper expires. Every operation still
// completes exactly once, each by one path, and the counts add up.
func TestResetAndCompleteForKeyStorm(t *testing.T) {
	const (
		n     = 5000
		nkeys = 64
	)
	var resets, forKey atomic.Int64
	p, ops := exactlyOnceStorm(t, n, nkeys, 4, func(p *pg, r *rand.Rand, actor int, op *mockOp, keys []string) {
		switch actor {
		case 0: // the forcer, seldom
			if r.IntN(8) == 0 {
				op.ForceComplete()
			}
		case 1: // the checker
			op.Ready.Store(r.IntN(4) == 0)
			p.CheckAndComplete(keys[r.IntN(len(keys))])
		case 2: // the heartbeat
			if p.ResetTimeout(op, time.Duration(1+r.IntN(30))*time.Millisecond) {
				resets.Add(1)
			}
		case 3: // the key answerer, seldom
			if r.IntN(1024) == 0 {
				forKey.Add(int64(p.CompleteForKey(fmt.Sprintf("k%d", r.IntN(nkeys)), errMoved)))
			}
		}
	})
	var byKey uint64
	for _, o := range ops {
		if errors.Is(o.Cause(), errMoved) {
			byKey++
		}
	}
	s := p.Stats()
	assert.Equal(t, byKey, s.CompletedForKey)
	assert.Equal(t, uint64(forKey.Load()), s.CompletedForKey, "CompleteForKey's returns")
	assert.Equal(t, uint64(n), s.CompletedEarly+s.Expired+s.CompletedForKey)
	t.Logf("stats: %+v; %d resets applied", s, resets.Load())
}
