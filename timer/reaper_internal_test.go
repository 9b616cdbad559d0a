package timer

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression (issue 43, 0): Close stops a Reaper around a MockTimer at
// whichever step of its loop it comes: before the loop's check of done,
// between the check and the wait on the mock clock, inside that wait, and
// once the wait has returned. Before, Close woke nothing on a MockTimer,
// so one that came after the check left the loop asleep on a clock that
// nothing would move again, and Close waiting for it.
//
// Each case lets the loop go round once (the test moves the clock by the
// loop's poll, so that its wait times out), then closes it at the step on
// the second round: the step's hook starts Close and, but inside the wait,
// returns only once Close has closed done and woken the timer, so that
// the loop goes on from that step with Close's wake-up behind it.
func TestReaperOnAMockTimerClosesAtEveryStep(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		step   reaperStep
		inWait bool // Close once the loop sleeps in the wait after step
	}{
		{"before the check of done", stepTop, false},
		{"between the check and the wait", stepChecked, false},
		{"inside the wait", stepChecked, true},
		{"after the wait returned", stepAdvanced, false},
	}
	for _, c := range cases {
		for _, pending := range []bool{false, true} {
			name := c.name
			if pending {
				name += ", a task pending"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				closeReaperAt(t, c.step, c.inWait, pending)
			})
		}
	}
}

func closeReaperAt(t *testing.T, at reaperStep, inWait, pending bool) {
	mt := NewMockTimer()
	if pending {
		task := &nopTask{}
		task.SetDelay(time.Hour)
		require.NoError(t, mt.Add(task))
	}
	asleep := func() bool { return mt.m.Clock.Armed() > 0 }
	var (
		r      *Reaper
		gate   = make(chan struct{}) // closed once r is set
		woken  = make(chan struct{})
		closed = make(chan error, 1)
		seen   int
		acted  atomic.Bool
	)
	closeIt := func() { closed <- r.Close() }
	r = newReaper("steps", mt, func(s reaperStep) {
		<-gate
		switch {
		case s == stepWoken:
			close(woken)
		case s == at:
			if seen++; seen != 2 {
				return
			}
			acted.Store(true)
			if inWait {
				go func() {
					for !asleep() {
						runtime.Gosched()
					}
					closeIt()
				}()
				return
			}
			go closeIt()
			<-woken
		}
	})
	close(gate)

	deadline := time.Now().Add(time.Minute) // a generous bound on a hang, not a timing
	for {
		select {
		case err := <-closed:
			assert.NoError(t, err)
			assert.True(t, acted.Load())
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not return: the reaper's loop sleeps on the mock clock")
		}
		// The loop sleeps in a wait before the step that closes it: let
		// it go round. (Read asleep first: once the hook has acted, the
		// loop's next wait is the one Close must end.)
		if asleep() && !acted.Load() {
			mt.Advance(reaperPoll)
		}
		runtime.Gosched()
	}
}

// Regression (issue 43, 0): 10,000 Reapers around MockTimers, each closed
// at a random moment of its loop (after a random number of yields, and
// of advances of the clock that end its waits or run its task), all stop:
// none is left asleep on its mock clock. goleak (TestMain) checks that
// their goroutines are gone.
func TestReaperOnAMockTimerCloseStorm(t *testing.T) {
	t.Parallel()
	const reapers = 10_000
	workers := runtime.GOMAXPROCS(0) * 4
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(reapers)
	next := atomic.Int64{}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 43))
			for next.Add(1) <= reapers {
				mt := NewMockTimer()
				if rng.IntN(2) == 0 {
					task := &nopTask{}
					task.SetDelay(time.Duration(rng.IntN(400)) * time.Millisecond)
					_ = mt.Add(task)
				}
				r := NewReaper("storm", mt)
				for range rng.IntN(8) {
					if rng.IntN(3) == 0 {
						mt.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
					}
					runtime.Gosched()
				}
				_ = r.Close()
				left.Add(-1)
			}
		}()
	}
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Minute): // a generous bound on a hang, not a timing
		t.Fatalf("%d of %d Reapers never stopped", left.Load(), reapers)
	}
}

type nopTask struct{ TaskBase }

func (*nopTask) Run() {}
