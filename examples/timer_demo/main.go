// Command timer_demo parks a few thousand timeouts in a SystemTimer, cancels
// most of them as if their requests had been answered, and reports how late
// the rest expired. It is the quick look at the timer package; the produce
// and fetch example shows the whole purgatory.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/purgatory-go/purgatory/timer"
)

type timeout struct {
	timer.TaskBase
	deadline time.Time
	late     *[]time.Duration
	mu       *sync.Mutex
	wg       *sync.WaitGroup
}

func (t *timeout) Run() {
	late := time.Since(t.deadline)
	t.mu.Lock()
	*t.late = append(*t.late, late)
	t.mu.Unlock()
	t.wg.Done()
}

func main() {
	n := flag.Int("n", 20000, "timeouts to park")
	maxDelay := flag.Duration("max-delay", time.Second, "largest timeout")
	answered := flag.Float64("answered", 0.9, "fraction cancelled before expiry")
	flag.Parse()

	st, err := timer.NewSystemTimer("demo")
	if err != nil {
		panic(err)
	}
	r := timer.NewReaper("demo", st)
	defer r.Close()

	var (
		mu   sync.Mutex
		late []time.Duration
		wg   sync.WaitGroup
	)
	tasks := make([]*timeout, *n)
	for i := range tasks {
		d := time.Duration(rand.Int64N(int64(*maxDelay)))
		t := &timeout{deadline: time.Now().Add(d), late: &late, mu: &mu, wg: &wg}
		t.SetDelay(d)
		wg.Add(1)
		tasks[i] = t
		if err := r.Add(t); err != nil {
			panic(err)
		}
	}
	fmt.Printf("parked %d timeouts over %v; %d pending\n", *n, *maxDelay, r.Size())
	cancelled := 0
	for _, t := range tasks {
		if rand.Float64() < *answered && t.Cancel() {
			wg.Done()
			cancelled++
		}
	}
	fmt.Printf("answered (cancelled) %d; %d left to expire\n", cancelled, r.Size())
	wg.Wait()
	slices.Sort(late)
	if len(late) > 0 {
		fmt.Printf("expired %d: lateness p50 %v, p99 %v, max %v\n", len(late),
			late[len(late)/2].Round(time.Microsecond), late[len(late)*99/100].Round(time.Microsecond),
			late[len(late)-1].Round(time.Microsecond))
	}
}
