package timer_test

import (
	"testing"
	"time"

	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/timer"
)

// The BenchmarkHot... benchmarks are the timer's hot paths, one goroutine
// each, each matched by exactly one -bench pattern, for make icount
// (icount.txt): their instruction counts repeat whatever the machine does.
// BenchmarkAddCancel and BenchmarkAddCancelNewTask time the same paths
// with a million others pending, against the runtime's timers.

// BenchmarkHotAddCancelNewTask: Add of a new task with a delay of about
// half an hour (a coarse level of the wheels) and its Cancel.
func BenchmarkHotAddCancelNewTask(b *testing.B) {
	tm := hotTimer(b, nil)
	for b.Loop() {
		task := &nopTask{}
		task.SetDelay(31 * time.Minute)
		_ = tm.Add(task)
		task.Cancel()
	}
}

// BenchmarkHotAddCancel: the same with one task, added again each time.
func BenchmarkHotAddCancel(b *testing.B) {
	tm := hotTimer(b, nil)
	task := &nopTask{}
	task.SetDelay(31 * time.Minute)
	for b.Loop() {
		_ = tm.Add(task)
		task.Cancel()
	}
}

// BenchmarkHotAdvance1000: 1,000 tasks added with delays spread over a
// second, and the AdvanceClock calls that expire them all once the
// clock has moved past the last.
func BenchmarkHotAdvance1000(b *testing.B) {
	clock := &optest.StepClock{}
	tm := hotTimer(b, clock)
	tasks := make([]nopTask, 1000)
	for b.Loop() {
		for i := range tasks {
			tasks[i].SetDelay(time.Duration(i+1) * time.Millisecond)
			_ = tm.Add(&tasks[i])
		}
		clock.Step(1001 * time.Millisecond)
		for tm.AdvanceClock(0) {
		}
		if n := tm.Size(); n != 0 {
			b.Fatalf("%d tasks left", n)
		}
	}
}

// hotTimer returns a SystemTimer that runs expired tasks inline, on clock,
// or on the system clock if clock is nil (nothing expires then).
func hotTimer(b *testing.B, clock *optest.StepClock) *timer.SystemTimer {
	b.Helper()
	opts := []timer.Option{timer.WithExecutors(0)}
	if clock != nil {
		opts = append(opts, timer.WithClock(clock))
	}
	tm, err := timer.NewSystemTimer("hot", opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tm.Close() })
	return tm
}
