package timer_test

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/purgatory-go/purgatory/timer"
)

type nopTask struct{ timer.TaskBase }

func (*nopTask) Run() {}

// pendingCounts are the numbers of other timers pending while one is added
// and cancelled.
var pendingCounts = []int{0, 100_000, 1_000_000}

// randomHour returns delays spread over an hour, so that pending tasks sit
// at every level of the wheels.
func randomHour(r *rand.Rand) time.Duration {
	return time.Minute + time.Duration(r.Int64N(int64(time.Hour-time.Minute)))
}

// loadedWheel returns a timer with pending tasks waiting, spread over an
// hour, and stops the benchmark's clock before closing it.
func loadedWheel(b *testing.B, pending int) *timer.SystemTimer {
	b.Helper()
	tm, err := timer.NewSystemTimer("bench")
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	others := make([]nopTask, pending)
	for i := range others {
		others[i].SetDelay(randomHour(r))
		_ = tm.Add(&others[i])
	}
	b.Cleanup(func() {
		runtime.KeepAlive(others)
		_ = tm.Close()
	})
	return tm
}

// loadedRuntime starts pending runtime timers spread over an hour, stopped
// when the benchmark ends.
func loadedRuntime(b *testing.B, pending int) {
	b.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	others := make([]*time.Timer, pending)
	for i := range others {
		others[i] = time.AfterFunc(randomHour(r), func() {})
	}
	b.Cleanup(func() {
		for _, t := range others {
			t.Stop()
		}
	})
}

// BenchmarkAddCancel measures Add followed by Cancel of one task while many
// others wait, against time.AfterFunc followed by Stop at the same count.
func BenchmarkAddCancel(b *testing.B) { benchAddCancel(b, false) }

// BenchmarkAddCancelNewTask is BenchmarkAddCancel with a new task for
// every Add, as a server has when each request brings its own timeout: the
// allocation is part of the cost, as it is of time.AfterFunc's.
func BenchmarkAddCancelNewTask(b *testing.B) { benchAddCancel(b, true) }

// benchAddCancel adds and cancels one task while pending others wait,
// against time.AfterFunc+Stop with as many runtime timers pending; with
// newTask, a new task for every Add.
func benchAddCancel(b *testing.B, newTask bool) {
	for _, pending := range pendingCounts {
		b.Run("impl=wheel/pending="+strconv.Itoa(pending), func(b *testing.B) {
			tm := loadedWheel(b, pending)
			d := randomHour(rand.New(rand.NewPCG(3, 4)))
			task := &nopTask{}
			task.SetDelay(d)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if newTask {
					task = &nopTask{}
					task.SetDelay(d)
				}
				_ = tm.Add(task)
				task.Cancel()
			}
		})
		b.Run("impl=runtime/pending="+strconv.Itoa(pending), func(b *testing.B) {
			loadedRuntime(b, pending)
			d := randomHour(rand.New(rand.NewPCG(3, 4)))
			f := func() {}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				time.AfterFunc(d, f).Stop()
			}
		})
	}
}

// BenchmarkAddCancelParallel is BenchmarkAddCancel from GOMAXPROCS goroutines.
func BenchmarkAddCancelParallel(b *testing.B) {
	const pending = 1_000_000
	b.Run("impl=wheel/pending=1000000", func(b *testing.B) {
		tm := loadedWheel(b, pending)
		var seed atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			task := &nopTask{}
			task.SetDelay(randomHour(rand.New(rand.NewPCG(seed.Add(1), 3))))
			for pb.Next() {
				_ = tm.Add(task)
				task.Cancel()
			}
		})
	})
	b.Run("impl=runtime/pending=1000000", func(b *testing.B) {
		loadedRuntime(b, pending)
		var seed atomic.Uint64
		f := func() {}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			d := randomHour(rand.New(rand.NewPCG(seed.Add(1), 3)))
			for pb.Next() {
				time.AfterFunc(d, f).Stop()
			}
		})
	})
}

// expiryTasks is how many tasks BenchmarkExpiry expires per round.
const expiryTasks = 1_000_000

type latencyTask struct {
	timer.TaskBase
	deadline time.Duration // on the timer package's clock
	late     *int64        // where Run stores its lateness
	done     *atomic.Int64
}

func (l *latencyTask) Run() {
	*l.late = int64(timer.SystemClock{}.Now() - l.deadline)
	l.done.Add(1)
}

// expiryResult is what one round of BenchmarkExpiry measures.
type expiryResult struct {
	cpu           time.Duration
	late          []int64
	maxGoroutines int
}

func (r expiryResult) report(b *testing.B) {
	b.Helper()
	lat := append([]int64(nil), r.late...)
	slices.Sort(lat)
	early := 0
	for _, l := range lat {
		if l < 0 {
			early++
		}
	}
	b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(len(lat)), "cpu-ns/task")
	b.ReportMetric(float64(lat[len(lat)*50/100])/1e6, "p50-late-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-late-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-late-ms")
	b.ReportMetric(float64(early), "early")
	b.ReportMetric(float64(r.maxGoroutines), "max-goroutines")
}

// measureRound runs schedule, which must arrange for every task to report
// to done, samples the goroutine count until all have, and returns the
// process CPU time it all took.
func measureRound(b *testing.B, n int, done *atomic.Int64, schedule func()) (time.Duration, int) {
	b.Helper()
	runtime.GC()
	start := processCPU()
	maxG := runtime.NumGoroutine()
	schedule()
	deadline := time.Now().Add(time.Minute)
	for done.Load() < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d tasks ran within a minute", done.Load(), n)
		}
		maxG = max(maxG, runtime.NumGoroutine())
		time.Sleep(time.Millisecond)
	}
	return processCPU() - start, maxG
}

// BenchmarkExpiry adds 1,000,000 tasks with random delays in [0, 1s) and
// waits for all of them to run, reporting process CPU per task, lateness
// percentiles, how many ran early, and the peak goroutine count. Run it with
// -benchtime=1x: each iteration is a whole round.
func BenchmarkExpiry(b *testing.B) {
	delays := make([]time.Duration, expiryTasks)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range delays {
		delays[i] = time.Duration(r.Int64N(int64(time.Second)))
	}
	b.Run("impl=wheel", func(b *testing.B) {
		for b.Loop() {
			st, err := timer.NewSystemTimer("expiry")
			if err != nil {
				b.Fatal(err)
			}
			rp := timer.NewReaper("expiry", st)
			var done atomic.Int64
			late := make([]int64, expiryTasks)
			tasks := make([]latencyTask, expiryTasks)
			cpu, maxG := measureRound(b, expiryTasks, &done, func() {
				for i := range tasks {
					t := &tasks[i]
					t.late, t.done = &late[i], &done
					t.SetDelay(delays[i])
					t.deadline = timer.SystemClock{}.Now() + delays[i]
					_ = rp.Add(t)
				}
			})
			_ = rp.Close()
			expiryResult{cpu, late, maxG}.report(b)
		}
	})
	b.Run("impl=runtime", func(b *testing.B) {
		for b.Loop() {
			var done atomic.Int64
			late := make([]int64, expiryTasks)
			cpu, maxG := measureRound(b, expiryTasks, &done, func() {
				for i := range delays {
					slot := &late[i]
					deadline := timer.SystemClock{}.Now() + delays[i]
					time.AfterFunc(delays[i], func() {
						*slot = int64(timer.SystemClock{}.Now() - deadline)
						done.Add(1)
					})
				}
			})
			expiryResult{cpu, late, maxG}.report(b)
		}
	})
}

// BenchmarkHeapPerPendingTask reports the heap held per pending task, with
// 1,000,000 pending: each task is its own allocation, as a user's would be.
func BenchmarkHeapPerPendingTask(b *testing.B) {
	const n = 1_000_000
	r := rand.New(rand.NewPCG(3, 3))
	b.Run("impl=wheel", func(b *testing.B) {
		for b.Loop() {
			st, err := timer.NewSystemTimer("heap")
			if err != nil {
				b.Fatal(err)
			}
			before := heapInUse()
			tasks := make([]*nopTask, n)
			for i := range tasks {
				t := &nopTask{}
				t.SetDelay(randomHour(r))
				_ = st.Add(t)
				tasks[i] = t
			}
			after := heapInUse()
			// The slice of pointers is the benchmark's, not the timer's.
			b.ReportMetric(float64(after-before-8*n)/n, "heap-B/task")
			runtime.KeepAlive(tasks)
			_ = st.Close()
		}
	})
	b.Run("impl=runtime", func(b *testing.B) {
		for b.Loop() {
			before := heapInUse()
			timers := make([]*time.Timer, n)
			f := func() {}
			for i := range timers {
				timers[i] = time.AfterFunc(randomHour(r), f)
			}
			after := heapInUse()
			b.ReportMetric(float64(after-before-8*n)/n, "heap-B/task")
			for _, t := range timers {
				t.Stop()
			}
		}
	})
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
