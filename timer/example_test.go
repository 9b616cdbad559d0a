package timer_test

import (
	"fmt"
	"time"

	"github.com/purgatory-go/purgatory/timer"
)

// expiry is a task: it embeds TaskBase and has a Run method.
type expiry struct {
	timer.TaskBase
	done chan string
}

func (e *expiry) Run() { e.done <- "expired" }

// A SystemTimer does nothing until something advances it; a Reaper is the
// goroutine that does.
func ExampleNewReaper() {
	st, err := timer.NewSystemTimer("requests")
	if err != nil {
		panic(err)
	}
	r := timer.NewReaper("requests", st)
	defer r.Close() // stops the goroutine, then closes st

	task := &expiry{done: make(chan string, 1)}
	task.SetDelay(20 * time.Millisecond)
	if err := r.Add(task); err != nil {
		panic(err)
	}
	fmt.Println(<-task.done)

	cancelled := &expiry{done: make(chan string, 1)}
	cancelled.SetDelay(time.Hour)
	_ = r.Add(cancelled)
	fmt.Println("cancelled:", cancelled.Cancel(), "pending:", r.Size())
	// Output:
	// expired
	// cancelled: true pending: 0
}

type reminder struct {
	timer.TaskBase
	msg string
}

func (r *reminder) Run() { fmt.Println(r.msg) }

// A MockTimer runs tasks only when the test moves its clock, on the test's
// goroutine, in deadline order.
func ExampleMockTimer() {
	mt := timer.NewMockTimer()
	defer mt.Close()
	for _, r := range []struct {
		d   time.Duration
		msg string
	}{{3 * time.Second, "third"}, {time.Second, "first"}, {2 * time.Second, "second"}} {
		task := &reminder{msg: r.msg}
		task.SetDelay(r.d)
		_ = mt.Add(task)
	}
	fmt.Println("ran:", mt.Advance(2*time.Second))
	fmt.Println("ran:", mt.Advance(time.Second))
	// Output:
	// first
	// second
	// ran: 2
	// third
	// ran: 1
}
