package purgatory_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Regression (issue 43, 0): a purgatory given a Reaper around a MockTimer
// shuts down whatever the reaper's goroutine is doing when Shutdown comes:
// Close's wake-up used to be lost when it came before the goroutine
// entered its wait on the mock clock, which nothing moves any more.
func TestShutdownOfAReaperOnAMockTimer(t *testing.T) {
	t.Parallel()
	for range 100 {
		func() {
			mt := timer.NewMockTimer()
			p, err := purgatory.New[string, *mockOp]("reaper-mock",
				purgatory.WithTimer(timer.NewReaper("r", mt)), purgatory.WithoutReaper())
			require.NoError(t, err)
			done := make(chan error, 1)
			defer func() {
				go func() { done <- p.Shutdown(context.Background()) }()
				select {
				case err := <-done:
					assert.NoError(t, err)
				case <-time.After(time.Minute):
					t.Fatal("Shutdown did not return")
				}
			}()
			op := newOp(time.Second)
			_, err = p.TryCompleteElseWatch(op, "k")
			require.NoError(t, err)
			mt.Advance(time.Second + time.Millisecond)
			assert.True(t, op.IsExpired())
		}()
	}
}

// Regression (issue 43, 0): Shutdown stops a purgatory's reaper on a
// MockTimer, its own or a Reaper it was given, whenever it comes: after a
// random number of yields and advances of the clock, with an operation
// parked or not. None is left asleep on its mock clock (goleak, in
// TestMain, checks that the goroutines are gone).
func TestShutdownStormOfReapersOnMockTimers(t *testing.T) {
	t.Parallel()
	n := 1000
	if *full {
		n = 10_000
	}
	var left atomic.Int64
	left.Store(int64(n))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		rng := rand.New(rand.NewPCG(43, 0))
		for i := range n {
			mt := timer.NewMockTimer()
			opts := []purgatory.Option{purgatory.WithTimer(mt)}
			if i%2 == 1 {
				opts = []purgatory.Option{purgatory.WithTimer(timer.NewReaper("r", mt)), purgatory.WithoutReaper()}
			}
			p, err := purgatory.New[string, *mockOp]("storm", opts...)
			if err != nil {
				panic(err)
			}
			if rng.IntN(2) == 0 {
				_, _ = p.TryCompleteElseWatch(newOp(time.Duration(rng.IntN(400))*time.Millisecond), "k")
			}
			for range rng.IntN(8) {
				if rng.IntN(3) == 0 {
					mt.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				}
				runtime.Gosched()
			}
			_ = p.Shutdown(context.Background())
			left.Add(-1)
		}
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Minute): // a generous bound on a hang, not a timing
		t.Fatalf("%d of %d Shutdowns never returned", left.Load(), n)
	}
}
