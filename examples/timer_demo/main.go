// Command timer_demo parks a few thousand timeouts in a SystemTimer, cancels
// most of them as if their requests had been answered, and reports how late
// the rest expired. It is the quick look at the timer package; the produce
// and fetch example shows the whole purgatory.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/purgatory-go/purgatory/timer"
)

type timeout struct {
	timer.TaskBase
	deadline time.Time
	r        *result
}

func (t *timeout) Run() {
	late := time.Since(t.deadline)
	t.r.mu.Lock()
	t.r.late = append(t.r.late, late)
	t.r.mu.Unlock()
	t.r.wg.Done()
}

// result counts what happened to the timeouts. Every timeout ends exactly
// one way: cancelled (Cancel returned true) or expired (Run ran), so
// Cancelled + len(late) == Parked once run returns.
type result struct {
	Parked    int
	Attempted int // Cancel calls, one per timeout chosen as answered
	Cancelled int // Cancel calls that stopped the timeout
	mu        sync.Mutex
	late      []time.Duration // one per expired timeout
	wg        sync.WaitGroup
}

// Expired is the number of timeouts whose Run ran.
func (r *result) Expired() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.late)
}

// run parks n timeouts with delays uniform in [0, maxDelay), then calls
// Cancel on each with probability answered, and waits for the rest to run.
func run(n int, maxDelay time.Duration, answered float64) (*result, error) {
	st, err := timer.NewSystemTimer("demo")
	if err != nil {
		return nil, err
	}
	rp := timer.NewReaper("demo", st)
	defer rp.Close()

	r := &result{Parked: n}
	tasks := make([]*timeout, n)
	for i := range tasks {
		d := time.Duration(rand.Int64N(int64(maxDelay)))
		t := &timeout{deadline: time.Now().Add(d), r: r}
		t.SetDelay(d)
		r.wg.Add(1)
		tasks[i] = t
		if err := rp.Add(t); err != nil {
			return nil, err
		}
	}
	for _, t := range tasks {
		if rand.Float64() >= answered {
			continue
		}
		r.Attempted++
		// A Cancel that returns false lost the race: the timeout has
		// already run (or is running) and is counted as expired.
		if t.Cancel() {
			r.Cancelled++
			r.wg.Done()
		}
	}
	r.wg.Wait()
	return r, nil
}

func main() {
	n := flag.Int("n", 20000, "timeouts to park")
	maxDelay := flag.Duration("max-delay", time.Second, "largest timeout")
	answered := flag.Float64("answered", 0.9, "fraction cancelled before expiry")
	flag.Parse()
	if *n <= 0 || *maxDelay <= 0 {
		fmt.Fprintln(os.Stderr, "timer_demo: -n and -max-delay must be positive")
		os.Exit(2)
	}

	r, err := run(*n, *maxDelay, *answered)
	if err != nil {
		fmt.Fprintln(os.Stderr, "timer_demo:", err)
		os.Exit(1)
	}
	expired := r.Expired()
	fmt.Printf("parked %d timeouts, delays uniform in [0, %v)\n", r.Parked, *maxDelay)
	fmt.Printf("answered %d: %d cancelled in time, %d too late (they had already expired)\n",
		r.Attempted, r.Cancelled, r.Attempted-r.Cancelled)
	fmt.Printf("%d parked = %d cancelled + %d expired\n", r.Parked, r.Cancelled, expired)
	late := slices.Clone(r.late)
	slices.Sort(late)
	if len(late) > 0 {
		fmt.Printf("expired %d: lateness p50 %v, p99 %v, max %v\n", len(late),
			late[len(late)/2].Round(time.Microsecond), late[len(late)*99/100].Round(time.Microsecond),
			late[len(late)-1].Round(time.Microsecond))
	}
}
