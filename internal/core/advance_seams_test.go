package core

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression (issue 30, defect 7): an Add that has read the clock before an
// Advance moved it, and files its task while that Advance runs, is either
// wholly before the Advance's poll of the delay queue or wholly after it.
// Here the Advance starts exactly between the Add's reading of the clock
// (deadline 1 ms) and its filing of the task: the task is due at the new
// time (500 ms) and must have run when the Advance returns. Before, the
// Advance polled the queue outside the timer's lock, found nothing, and
// returned with the task unrun until the next Advance.
func TestAdvanceBetweenAddsClockReadAndFiling(t *testing.T) {
	mt := NewMock()
	defer mt.Close()
	turning := make(chan struct{})
	var once, started sync.Once
	advanced := make(chan int, 1)
	mt.hooks = &hooks{
		turning: func() { once.Do(func() { close(turning) }) },
		clockRead: func() {
			started.Do(func() {
				go func() { advanced <- mt.Advance(500 * time.Millisecond) }()
				<-turning // the Advance has moved the clock and begun its turn
			})
		},
	}
	p := newProbe(time.Millisecond)
	require.NoError(t, mt.Add(p))
	assert.Equal(t, 1, <-advanced, "the Advance ran the task it made due")
	assert.Equal(t, int32(1), p.runs.Load())
	assert.Zero(t, mt.Size())
}

// Regression (issue 30, defect 8): goroutines advancing one MockTimer
// (Advance and AdvanceClock) while others add tasks. Whenever an Advance
// returns, every task whose Add returned before it was called and whose
// deadline is at or before the clock has run; no task runs before its
// deadline or twice. Before, the two advancers polled the delay queue
// outside the lock and could each hold a bucket the other needed.
func TestConcurrentAdvancesRunEverythingDue(t *testing.T) {
	rounds := 30
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		mt := NewMock()
		const adders, perAdder = 3, 150
		type rec struct {
			task    stamped
			lo, hi  time.Duration // bounds of the deadline
			added   atomic.Bool
			runs    atomic.Int32
			ranAt   atomic.Int64
			delayed time.Duration
		}
		all := make([]*rec, adders*perAdder)
		for i := range all {
			r := &rec{delayed: time.Duration(rand.IntN(40)) * time.Millisecond}
			r.task.run = func() {
				r.runs.Add(1)
				r.ranAt.Store(int64(mt.Now()))
			}
			r.task.SetDelay(r.delayed)
			all[i] = r
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for a := range adders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, r := range all[a*perAdder : (a+1)*perAdder] {
					r.lo = mt.Now() + r.delayed
					require.NoError(t, mt.Add(&r.task))
					r.hi = mt.Now() + r.delayed
					r.added.Store(true)
				}
			}()
		}
		wg.Add(1)
		go func() { // a second advancer, as a reaper or another test goroutine would be
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					mt.AdvanceClock(0)
				}
			}
		}()
		for range 60 {
			var before []*rec
			for _, r := range all {
				if r.added.Load() {
					before = append(before, r)
				}
			}
			mt.Advance(time.Millisecond)
			now := mt.Now()
			for _, r := range before {
				if r.hi <= now {
					require.Equal(t, int32(1), r.runs.Load(), "round %d: a task due at %v not run by the Advance to %v", round, r.hi, now)
				}
			}
		}
		close(stop)
		wg.Wait()
		mt.Advance(time.Hour)
		for _, r := range all {
			require.Equal(t, int32(1), r.runs.Load(), "each task runs once")
			require.GreaterOrEqual(t, time.Duration(r.ranAt.Load()), r.lo, "never before its deadline")
		}
		require.NoError(t, mt.Close())
	}
}

// stamped is a task that calls run.
type stamped struct {
	taskBase
	run func()
}

func (s *stamped) Run() { s.run() }
