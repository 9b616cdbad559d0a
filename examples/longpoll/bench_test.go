package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The benchmarks drive both servers' handlers directly, as net/http would
// call them, without the network: what net/http itself costs per
// connection and request is the same for both and would only blur the
// difference. Each poll has a cancellable context, as a request's has.
//
//	cd examples && go test -run '^$' -bench . -count 6 ./longpoll

// impl is a server under test: its handler, how many polls it holds
// parked, and how to stop it.
type impl struct {
	name string
	new  func(b *testing.B) (h http.Handler, parked func() int, stop func())
}

var impls = []impl{
	{"purgatory", func(b *testing.B) (http.Handler, func() int, func()) {
		s, err := newServer(0)
		if err != nil {
			b.Fatal(err)
		}
		return s, s.polls.NumDelayed, func() { _ = s.polls.Shutdown(context.Background()) }
	}},
	{"naive", func(b *testing.B) (http.Handler, func() int, func()) {
		s := newNaiveServer()
		return s, func() int { return int(s.parked.Load()) }, func() {}
	}},
}

// writer is a ResponseWriter that keeps the status and drops the body.
type writer struct {
	h    http.Header
	code int
}

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(p []byte) (int, error) { return len(p), nil }
func (w *writer) WriteHeader(code int)        { w.code = code }

// round is n polls ready to be served, built before anything is measured.
type round struct {
	reqs    []*http.Request
	ws      []*writer
	cancels []context.CancelFunc
	ends    []time.Time // when each poll's handler returned
}

// newRound builds n polls on keys keys, waiting past version after.
func newRound(n, keys int, timeout string, after int) *round {
	r := &round{ends: make([]time.Time, n)}
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		target := fmt.Sprintf("/wait?key=k%d&after=%d&timeout=%s", i%keys, after, timeout)
		r.reqs = append(r.reqs, httptest.NewRequest("GET", target, nil).WithContext(ctx))
		r.ws = append(r.ws, &writer{h: make(http.Header), code: http.StatusOK})
		r.cancels = append(r.cancels, cancel)
	}
	return r
}

// start serves every poll of the round on a goroutine of its own, as
// net/http would, and returns a WaitGroup done when all have returned.
func (r *round) start(h http.Handler) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range r.reqs {
		wg.Go(func() {
			h.ServeHTTP(r.ws[i], r.reqs[i])
			r.ends[i] = time.Now()
		})
	}
	return &wg
}

func (r *round) release() {
	for _, cancel := range r.cancels {
		cancel()
	}
}

func notifyKeys(h http.Handler, keys int) {
	for k := range keys {
		h.ServeHTTP(&writer{h: make(http.Header)}, httptest.NewRequest("POST", fmt.Sprintf("/notify?key=k%d", k), nil))
	}
}

// waitParked returns once parked reports n. Polling, not sleeping a guess:
// the wait is not part of what is measured.
func waitParked(parked func() int, n int) {
	for parked() != n {
		time.Sleep(100 * time.Microsecond)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHeldPoll reports the memory a parked poll holds: heap, and the
// stack of the goroutine serving it, over 10,000 polls on 1,000 keys, in
// bytes per poll. The requests, contexts and writers are built before the
// first reading, so only what serving a poll adds is counted.
func BenchmarkHeldPoll(b *testing.B) {
	const polls, keys = 10_000, 1_000
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			h, parked, stop := im.new(b)
			defer stop()
			var heap, stack float64
			for i := 0; b.Loop(); i++ {
				r := newRound(polls, keys, "5m", i) // each round's notifies move every key on by one
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				wg := r.start(h)
				waitParked(parked, polls)
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap += float64(after.HeapAlloc) - float64(before.HeapAlloc)
				stack += float64(after.StackInuse) - float64(before.StackInuse)
				notifyKeys(h, keys)
				wg.Wait()
				r.release()
			}
			b.ReportMetric(heap/float64(b.N)/polls, "heap-B/poll")
			b.ReportMetric(stack/float64(b.N)/polls, "stack-B/poll")
		})
	}
}

// BenchmarkWakeAll reports, for 10,000 polls parked on one key, the time
// from the start of the notify to the return of the last poll's handler:
// the median and 99th percentile over the benchmark's iterations.
func BenchmarkWakeAll(b *testing.B) {
	const polls = 10_000
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			h, parked, stop := im.new(b)
			defer stop()
			var lat []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				r := newRound(polls, 1, "5m", i)
				wg := r.start(h)
				waitParked(parked, polls)
				b.StartTimer()
				start := time.Now()
				notifyKeys(h, 1)
				wg.Wait()
				lat = append(lat, slices.MaxFunc(r.ends, time.Time.Compare).Sub(start))
				r.release()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
			b.ReportMetric(float64(lat[(len(lat)*99)/100]), "p99-ns")
		})
	}
}

// BenchmarkPollCPU reports the process's CPU time (user and system, every
// goroutine, GC included) per poll, over its whole life from the handler's
// start to its return: rounds of 1,000 polls on 100 keys, either answered
// by one notify per key or left to their 10ms timeout.
func BenchmarkPollCPU(b *testing.B) {
	const polls, keys = 1_000, 100
	for _, end := range []string{"notified", "expired"} {
		for _, im := range impls {
			b.Run("end="+end+"/impl="+im.name, func(b *testing.B) {
				h, parked, stop := im.new(b)
				defer stop()
				var cpu time.Duration
				n := 0
				for i := 0; b.Loop(); i++ {
					r := newRound(polls, keys, "10ms", 0)
					if end == "notified" {
						r = newRound(polls, keys, "5m", i)
					}
					c0 := cpuTime()
					wg := r.start(h)
					if end == "notified" {
						waitParked(parked, polls)
						notifyKeys(h, keys)
					}
					wg.Wait()
					cpu += cpuTime() - c0
					n += polls
					r.release()
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/poll")
			})
		}
	}
}
