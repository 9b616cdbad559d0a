package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The benchmarks drive both servers' handlers directly, as net/http would
// call them, without the network: what net/http costs per connection and
// request is the same for both and would only blur the difference. Each
// receive has a cancellable context, as a request's has.
//
//	cd examples && go test -run '^$' -bench . -benchtime 20000x -count 6 ./queue

// impl is a server under test: its handler, how many receives it holds
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
		return s, s.svc.p.NumDelayed, func() { _ = s.svc.shutdown(context.Background()) }
	}},
	{"naive", func(b *testing.B) (http.Handler, func() int, func()) {
		s := newNaiveServer()
		return s, func() int { return int(s.parked.Load()) }, func() {}
	}},
}

// writer is a ResponseWriter that keeps the status and the body.
type writer struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func newWriter() *writer { return &writer{h: make(http.Header)} }

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(p []byte) (int, error) { return w.body.Write(p) }
func (w *writer) WriteHeader(code int)        { w.code = code }

func (w *writer) reset() { w.code = http.StatusOK; w.body.Reset() }

// waitParked returns once parked reports n. Polling, not sleeping a guess:
// the wait is not part of what is measured.
func waitParked(parked func() int, n int) {
	for parked() != n {
		time.Sleep(100 * time.Microsecond)
	}
}

// BenchmarkReceive sends one message at a time to a queue on which
// parked receivers wait, and times each from the start of the send to the
// return of the receive handler that got it: the message wakes the
// receiver parked longest, which then deletes it and parks again at the
// back. It reports receives a second and the 99th percentile of the
// send-to-receive latency (nearest rank). One message is in flight at a
// time, so what grows with the receivers parked is what waking one of
// them costs.
func BenchmarkReceive(b *testing.B) {
	for _, im := range impls {
		for _, n := range []int{1, 1_000, 10_000} {
			b.Run(fmt.Sprintf("impl=%s/parked=%d", im.name, n), func(b *testing.B) {
				h, parked, stop := im.new(b)
				defer stop()
				ctx, cancel := context.WithCancel(context.Background())
				got := make(chan time.Time, 1)
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() { receiver(ctx, h, got) })
				}
				waitParked(parked, n)
				send := httptest.NewRequest("POST", "/queues/q/messages", nil)
				sw := newWriter()
				lat := make([]time.Duration, 0, b.N)
				for b.Loop() {
					t0 := time.Now()
					send.Body = http.NoBody
					h.ServeHTTP(sw, send)
					lat = append(lat, (<-got).Sub(t0))
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "receives/s")
				slices.Sort(lat)
				b.ReportMetric(float64(lat[(len(lat)*99+99)/100-1].Nanoseconds()), "p99-ns")
				b.ReportMetric(0, "ns/op")
				cancel()
				wg.Wait()
			})
		}
	}
}

// receiver receives from queue q until ctx ends; it reports the time it
// got each message on got, then deletes it.
func receiver(ctx context.Context, h http.Handler, got chan<- time.Time) {
	req := httptest.NewRequest("GET", "/queues/q/messages?wait=5m&visibility=5m", nil).WithContext(ctx)
	w := newWriter()
	for ctx.Err() == nil {
		w.reset()
		h.ServeHTTP(w, req)
		at := time.Now()
		if w.body.Len() == 0 || !strings.Contains(w.body.String(), "receipt") {
			continue // hung up, or an empty answer
		}
		var a struct{ Messages []Message }
		if err := json.Unmarshal(w.body.Bytes(), &a); err != nil {
			panic(err)
		}
		got <- at
		for _, m := range a.Messages {
			dw := newWriter()
			h.ServeHTTP(dw, httptest.NewRequest("DELETE", "/queues/q/messages/"+m.Receipt, nil))
		}
	}
}

// BenchmarkHeapPerParkedReceive reports the heap a parked receive holds,
// over 10,000 receives parked on one queue, in bytes per receive, for both
// servers in each iteration, in alternating order. The requests, contexts
// and writers are built before the first reading, so only what serving a
// receive adds is counted; the goroutine's stack, the same for both, is
// not heap. The second reading waits 500ms after the last park: the
// purgatory's timer holds a wait of 800ms or more back from its wheels
// for up to 400ms, and a receive parked for its whole wait pays for its
// slot there too.
func BenchmarkHeapPerParkedReceive(b *testing.B) {
	const receives = 10_000
	var heap [2]float64
	warmGoroutines(receives)
	type srv struct {
		h      http.Handler
		parked func() int
	}
	var ss []srv
	for _, im := range impls {
		h, parked, stop := im.new(b)
		b.Cleanup(stop)
		ss = append(ss, srv{h, parked})
	}
	for i := 0; b.Loop(); i++ {
		for j := range ss {
			s := (i + j) % len(ss)
			reqs := make([]*http.Request, receives)
			ws := make([]*writer, receives)
			cancels := make([]context.CancelFunc, receives)
			for k := range reqs {
				ctx, cancel := context.WithCancel(context.Background())
				reqs[k] = httptest.NewRequest("GET", "/queues/q/messages?wait=5m", nil).WithContext(ctx)
				ws[k], cancels[k] = newWriter(), cancel
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var wg sync.WaitGroup
			for k := range reqs {
				wg.Go(func() { ss[s].h.ServeHTTP(ws[k], reqs[k]) })
			}
			waitParked(ss[s].parked, receives)
			time.Sleep(500 * time.Millisecond)
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap[s] += float64(after.HeapAlloc) - float64(before.HeapAlloc)
			// Without this the requests and writers, which only the
			// handlers' goroutines still use, may be collected between
			// the readings and counted against the receive: 80 B instead
			// of 670 B, when this was written.
			runtime.KeepAlive(reqs)
			runtime.KeepAlive(ws)
			for _, cancel := range cancels {
				cancel()
			}
			wg.Wait()
		}
	}
	for s := range heap {
		heap[s] /= float64(b.N) * receives
	}
	b.ReportMetric(heap[0], impls[0].name+"-heap-B/receive")
	b.ReportMetric(heap[1], impls[1].name+"-heap-B/receive")
	b.ReportMetric(heap[0]/heap[1], "heap-ratio")
	b.ReportMetric(0, "ns/op")
}

// warmGoroutines starts n goroutines and lets them end. The runtime keeps
// the descriptor of every goroutine it has made for reuse, so the first
// round of receives in a process allocates n of them, which would be
// counted against whichever server happened to serve first.
func warmGoroutines(n int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { <-release })
	}
	close(release)
	wg.Wait()
}
