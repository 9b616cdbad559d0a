package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
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
//	cd examples && go test -run '^$' -bench . -benchtime 20x -count 6 ./longpoll

// impl is a server under test: its handler, how many polls it holds
// parked, and how to stop it.
type impl struct {
	name string
	new  func(b *testing.B) (h http.Handler, parked func() int, stop func())
}

var impls = []impl{
	{"purgatory", func(b *testing.B) (http.Handler, func() int, func()) {
		s, err := newServer(config{})
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

// servers starts both servers for a benchmark, stopped when it ends.
func servers(b *testing.B) []served {
	var ss []served
	for _, im := range impls {
		h, parked, stop := im.new(b)
		b.Cleanup(stop)
		ss = append(ss, served{im.name, h, parked})
	}
	return ss
}

type served struct {
	name   string
	h      http.Handler
	parked func() int
}

// each runs f for both servers in every iteration, alternating which goes
// first, so that a machine busy with other work weighs on both alike and
// the ratios come from one run.
func each(b *testing.B, f func(i, s int, srv served)) {
	ss := servers(b)
	for i := 0; b.Loop(); i++ {
		for j := range ss {
			s := (i + j) % len(ss)
			f(i, s, ss[s])
		}
	}
}

// report reports one figure for each server, and the purgatory's as a
// ratio to the naive server's.
func report(b *testing.B, per [2]float64, unit string) {
	b.ReportMetric(per[0], impls[0].name+"-"+unit)
	b.ReportMetric(per[1], impls[1].name+"-"+unit)
	b.ReportMetric(per[0]/per[1], strings.SplitN(unit, "-", 2)[0]+"-ratio")
}

// BenchmarkHeldPoll reports the memory a parked poll holds: heap, and the
// stack of the goroutine serving it, over 10,000 polls on 1,000 keys, in
// bytes per poll. The requests, contexts and writers are built before the
// first reading, so only what serving a poll adds is counted. The second
// reading waits 500ms after the last park: the purgatory holds a timeout
// of 800ms or more back from its timer for 400ms (most polls end sooner),
// and a poll held for its whole timeout pays for its timer entry too.
func BenchmarkHeldPoll(b *testing.B) {
	const polls, keys = 10_000, 1_000
	var heap, stack [2]float64
	warmGoroutines(polls)
	each(b, func(i, s int, srv served) {
		r := newRound(polls, keys, "5m", i) // each round's notifies move every key on by one
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		wg := r.start(srv.h)
		waitParked(srv.parked, polls)
		time.Sleep(500 * time.Millisecond)
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap[s] += float64(after.HeapAlloc) - float64(before.HeapAlloc)
		stack[s] += float64(after.StackInuse) - float64(before.StackInuse)
		notifyKeys(srv.h, keys)
		wg.Wait()
		r.release()
	})
	for s := range heap {
		heap[s] /= float64(b.N) * polls
		stack[s] /= float64(b.N) * polls
	}
	report(b, heap, "heap-B/poll")
	report(b, stack, "stack-B/poll")
}

// warmGoroutines starts n goroutines and lets them end. The runtime keeps
// the descriptor of every goroutine it has made for reuse, so the first
// round of polls in a process allocates n of them, which would be counted
// against whichever server happened to serve first.
func warmGoroutines(n int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { <-release })
	}
	close(release)
	wg.Wait()
}

// BenchmarkWakeAll reports, for 10,000 polls parked on one key, the time
// from the start of the notify to the return of the last poll's handler:
// the median and 99th percentile (nearest rank) of five rounds an
// iteration, so that -benchtime 20x gives 100 of each server's.
func BenchmarkWakeAll(b *testing.B) {
	const polls, rounds = 10_000, 5
	var lat [2][]time.Duration
	each(b, func(i, s int, srv served) {
		for j := range rounds {
			r := newRound(polls, 1, "5m", i*rounds+j)
			wg := r.start(srv.h)
			waitParked(srv.parked, polls)
			start := time.Now()
			notifyKeys(srv.h, 1)
			wg.Wait()
			lat[s] = append(lat[s], slices.MaxFunc(r.ends, time.Time.Compare).Sub(start))
			r.release()
		}
	})
	p50, p99 := percentiles(lat)
	report(b, p50, "p50-ns")
	report(b, p99, "p99-ns")
}

// percentiles sorts each of the two sets of latencies (one a server, or a
// mode) and returns their medians and 99th percentiles, in nanoseconds
// (nearest rank).
func percentiles(lat [2][]time.Duration) (p50, p99 [2]float64) {
	for s := range lat {
		slices.Sort(lat[s])
		n := len(lat[s])
		p50[s] = float64(lat[s][(n+1)/2-1])
		p99[s] = float64(lat[s][(n*99+99)/100-1])
	}
	return p50, p99
}

// BenchmarkPollCPU reports the process's CPU time (user and system, every
// goroutine, GC included) per poll, over its whole life from the handler's
// start to its return: rounds of 1,000 polls on 100 keys, either answered
// by one notify per key or left to their 10ms timeout.
func BenchmarkPollCPU(b *testing.B) {
	const polls, keys = 1_000, 100
	for _, end := range []string{"notified", "expired"} {
		b.Run("end="+end, func(b *testing.B) {
			var cpu [2]float64
			each(b, func(i, s int, srv served) {
				r := newRound(polls, keys, "10ms", 0)
				if end == "notified" {
					r = newRound(polls, keys, "5m", i)
				}
				c0 := cpuTime()
				wg := r.start(srv.h)
				if end == "notified" {
					waitParked(srv.parked, polls)
					notifyKeys(srv.h, keys)
				}
				wg.Wait()
				cpu[s] += float64(cpuTime() - c0)
				r.release()
			})
			for s := range cpu {
				cpu[s] /= float64(b.N) * polls
			}
			report(b, cpu, "cpu-ns/poll")
		})
	}
}

// BenchmarkPoll serves, in each iteration, 10 polls on one key from start
// to end on one server: answered by one notify (end=notified), or left to
// a 1ms timeout (end=expired), or answered at once because the key is
// already past after (end=answered: what both servers share). Unlike the benchmarks above it runs one
// server at a time, so that icount.sh counts the instructions of each:
//
//	bash ../../shared/tools/icount.sh -n 2000 ./longpoll 'BenchmarkPoll/^impl=purgatory$/^end=notified$'
//
// Each iteration pays for what a request brings (a cancellable context, a
// goroutine) on both servers alike; divide by 10 for a poll.
func BenchmarkPoll(b *testing.B) {
	const polls = 10
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			for _, end := range []string{"notified", "expired", "answered"} {
				b.Run("end="+end, func(b *testing.B) {
					h, parked, stop := im.new(b)
					defer stop()
					tmpl := httptest.NewRequest("GET", "/wait", nil)
					ws := make([]*writer, polls)
					for j := range ws {
						ws[j] = &writer{h: make(http.Header)}
					}
					notify := httptest.NewRequest("POST", "/notify?key=k", nil)
					nw := &writer{h: make(http.Header)}
					for i := 0; b.Loop(); i++ {
						switch end {
						case "notified":
							tmpl.URL.RawQuery = "key=k&timeout=5m&after=" + strconv.Itoa(i)
						case "expired":
							tmpl.URL.RawQuery = "key=x&timeout=1ms"
						case "answered":
							tmpl.URL.RawQuery = "key=k&timeout=5m&after=0"
							if i == 0 {
								h.ServeHTTP(nw, notify)
							}
						}
						var wg sync.WaitGroup
						for j := range polls {
							ctx, cancel := context.WithCancel(context.Background())
							req := tmpl.WithContext(ctx)
							wg.Go(func() {
								h.ServeHTTP(ws[j], req)
								cancel()
							})
						}
						if end == "notified" {
							for parked() != polls {
								runtime.Gosched()
							}
							h.ServeHTTP(nw, notify)
						}
						wg.Wait()
					}
				})
			}
		})
	}
}
