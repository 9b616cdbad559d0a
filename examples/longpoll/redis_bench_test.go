package main

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// The README's figures for more than one server: what waking 10,000 polls
// costs when they are spread over three servers sharing a redis-server,
// against the same polls on one server in memory, and the heap a server
// holds per parked poll in each mode. Each iteration serves both modes, in
// alternating order, so that the ratios come from one run:
//
//	cd examples && go test -run '^$' -bench 'Cluster' -benchtime 20x -count 6 ./longpoll

// modes returns the two deployments: "memory", one server alone, and
// "redis", three servers on one redis-server, which each benchmark's
// cleanup stops.
func modes(b *testing.B) [2][]*server {
	b.Helper()
	r := startRedis(b)
	mem, err := newServer(config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mem.close(context.Background()) })
	cluster := make([]*server, 3)
	for i := range cluster {
		rs := newRedisStore(r.addr, redisOptions{})
		if cluster[i], err = newServer(config{store: rs}); err != nil {
			b.Fatal(err)
		}
		s := cluster[i]
		b.Cleanup(func() { _ = s.close(context.Background()); _ = rs.client.Close() })
	}
	for _, s := range cluster {
		for !s.listen.Load() {
			time.Sleep(time.Millisecond)
		}
	}
	return [2][]*server{{mem}, cluster}
}

var modeNames = [2]string{"memory", "redis"}

// eachMode runs f for both modes in every iteration, alternating which
// goes first.
func eachMode(b *testing.B, f func(i, m int, ss []*server)) {
	ms := modes(b)
	for i := 0; b.Loop(); i++ {
		for j := range ms {
			m := (i + j) % len(ms)
			f(i, m, ms[m])
		}
	}
}

func reportModes(b *testing.B, per [2]float64, unit string) {
	b.ReportMetric(per[0], modeNames[0]+"-"+unit)
	b.ReportMetric(per[1], modeNames[1]+"-"+unit)
	b.ReportMetric(per[1]/per[0], unit[:len(unit)-len("-ns")]+"-ratio")
}

// startOn serves poll i of the round on server i%len(ss), each on a
// goroutine of its own.
func (r *round) startOn(ss []*server) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range r.reqs {
		wg.Go(func() {
			ss[i%len(ss)].ServeHTTP(r.ws[i], r.reqs[i])
			r.ends[i] = time.Now()
		})
	}
	return &wg
}

// BenchmarkClusterWakeAll reports, for 10,000 polls parked on one key, the
// time from the start of a notify made on the first server to the return
// of the last poll's handler on any server: the median and 99th
// percentile (nearest rank) of five rounds an iteration, as
// BenchmarkWakeAll does. The ratio is redis's over memory's.
func BenchmarkClusterWakeAll(b *testing.B) {
	const polls, rounds = 10_000, 5
	var lat [2][]time.Duration
	eachMode(b, func(i, m int, ss []*server) {
		for j := range rounds {
			r := newRound(polls, 1, "5m", i*rounds+j)
			wg := r.startOn(ss)
			for parked(ss) != polls {
				time.Sleep(100 * time.Microsecond)
			}
			start := time.Now()
			notifyKeys(ss[0], 1)
			wg.Wait()
			lat[m] = append(lat[m], slices.MaxFunc(r.ends, time.Time.Compare).Sub(start))
			for _, w := range r.ws {
				if w.code != http.StatusOK {
					b.Fatalf("%s: a poll was answered %d", modeNames[m], w.code)
				}
			}
			r.release()
		}
	})
	p50, p99 := percentiles(lat)
	reportModes(b, p50, "p50-ns")
	reportModes(b, p99, "p99-ns")
}

// BenchmarkClusterHeldPoll reports the heap one server holds per parked
// poll, over 10,000 polls on 1,000 keys, all on that server (in redis
// mode, the first of the three), measured as BenchmarkHeldPoll does but
// after two collections: the first poll on each key reads it from Redis,
// and go-redis keeps the timers and buffers of that burst of reads in
// sync.Pools, which let go of them at the second collection after (one
// collection leaves about 180 B a poll of them).
func BenchmarkClusterHeldPoll(b *testing.B) {
	const polls, keys = 10_000, 1_000
	var heap [2]float64
	warmGoroutines(polls)
	eachMode(b, func(i, m int, ss []*server) {
		r := newRound(polls, keys, "5m", i)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		wg := r.startOn(ss[:1])
		for ss[0].polls.NumDelayed() != polls {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(500 * time.Millisecond)
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap[m] += float64(after.HeapAlloc) - float64(before.HeapAlloc)
		notifyKeys(ss[0], keys)
		wg.Wait()
		r.release()
	})
	for m := range heap {
		heap[m] /= float64(b.N) * polls
	}
	b.ReportMetric(heap[0], "memory-heap-B/poll")
	b.ReportMetric(heap[1], "redis-heap-B/poll")
	b.ReportMetric(heap[1]/heap[0], "heap-ratio")
}
