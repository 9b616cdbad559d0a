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

// lease is a message's visibility timeout: when it runs, the message can
// be seen again.
type lease struct {
	timer.TaskBase
	mt  *timer.MockTimer
	msg string
}

func (l *lease) Run() { fmt.Printf("%s visible again at %v\n", l.msg, l.mt.Now()) }

// A task is reset as time.Timer.Reset resets a timer: Cancel, keeping
// what it reports, then SetDelay and Add. Cancel's true says the run of
// the old deadline will not come; false, that the task was not pending
// any more (here it had run; on a SystemTimer its Run might still be
// under way or waiting for the executor).
func ExampleTaskBase_SetDelay_reset() {
	mt := timer.NewMockTimer()
	defer mt.Close()
	reset := func(l *lease, d time.Duration) {
		stopped := l.Cancel()
		l.SetDelay(d)
		_ = mt.Add(l)
		fmt.Printf("reset at %v, old run stopped: %v\n", mt.Now(), stopped)
	}

	l := &lease{mt: mt, msg: "m1"}
	l.SetDelay(30 * time.Second)
	_ = mt.Add(l)
	mt.Advance(20 * time.Second)
	reset(l, 30*time.Second) // the consumer asks for more time: due at 50s
	mt.Advance(40 * time.Second)
	reset(l, 30*time.Second) // too late: it ran at 50s, and runs again at 1m30s
	mt.Advance(30 * time.Second)
	// Output:
	// reset at 20s, old run stopped: true
	// m1 visible again at 50s
	// reset at 1m0s, old run stopped: false
	// m1 visible again at 1m30s
}
