package purgatory_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// benchOp is the smallest useful operation: Base and a flag.
type benchOp struct {
	operation.Base
	ready atomic.Bool
}

func (o *benchOp) TryComplete() bool {
	if o.ready.Load() {
		return o.ForceComplete()
	}
	return false
}
func (o *benchOp) OnComplete()   {}
func (o *benchOp) OnExpiration() {}

func newBenchOp(timeout time.Duration) *benchOp {
	o := &benchOp{}
	o.Init(o, timeout)
	return o
}

type tpKey = operation.TopicPartitionKey

// parkIdle parks n operations with hour-long timeouts on a key space of its
// own, three keys each, so that they are pending but never scanned by the
// benchmark's checks.
func parkIdle(b *testing.B, p *purgatory.Purgatory[tpKey, *benchOp], n int) {
	b.Helper()
	r := rand.New(rand.NewPCG(5, 5))
	for range n {
		o := newBenchOp(time.Hour)
		k := r.Int32N(int32(max(n/10, 1)))
		if _, err := p.TryCompleteElseWatch(o, tpKey{Topic: "idle", Partition: k},
			tpKey{Topic: "idle", Partition: k + 1}, tpKey{Topic: "idle", Partition: k + 2}); err != nil {
			b.Fatal(err)
		}
	}
}

// watchAndComplete parks a new operation on three hot keys chosen by base
// and i, and completes it through one of them.
func watchAndComplete(b *testing.B, p *purgatory.Purgatory[tpKey, *benchOp], base, i int32) {
	o := newBenchOp(30 * time.Second)
	k := base + i%1000
	keys := []tpKey{{Topic: "hot", Partition: k}, {Topic: "hot", Partition: k + 1000}, {Topic: "hot", Partition: k + 2000}}
	if done, err := p.TryCompleteElseWatch(o, keys...); err != nil || done {
		b.Fatal("not parked", err)
	}
	o.ready.Store(true)
	if p.CheckAndComplete(keys[1]) != 1 {
		b.Fatal("not completed")
	}
}

// newBenchPurgatory returns a purgatory with pending operations parked on
// keys of their own, shut down (outside the timing) when the benchmark ends.
func newBenchPurgatory(b *testing.B, pending int, opts ...purgatory.Option) *purgatory.Purgatory[tpKey, *benchOp] {
	b.Helper()
	p, err := purgatory.New[tpKey, *benchOp]("bench", opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	parkIdle(b, p, pending)
	return p
}

// BenchmarkWatchAndComplete parks an operation on three keys and completes
// it with CheckAndComplete on one of them, while N others wait.
func BenchmarkWatchAndComplete(b *testing.B) {
	for _, pending := range []int{0, 100_000, 1_000_000} {
		name := "pending=" + strconv.Itoa(pending)
		b.Run(name, func(b *testing.B) {
			p := newBenchPurgatory(b, pending)
			b.ReportAllocs()
			b.ResetTimer()
			for i := int32(0); b.Loop(); i++ {
				watchAndComplete(b, p, 0, i)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			p := newBenchPurgatory(b, pending)
			var seq atomic.Int32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				base := seq.Add(1) * 100_000 // each goroutine on keys of its own
				for i := int32(0); pb.Next(); i++ {
					watchAndComplete(b, p, base, i)
				}
			})
		})
	}
}

// BenchmarkObserver is what observing costs per operation parked and
// completed: the purgatory's side of it (a clock read at the park and at
// the departure, the larger handle, the calls) with a timeSum observer
// that adds up the times, against no observer at all. A
// contrib/timing.Recorder adds its histogram's few atomic adds to this;
// contrib/otel's BenchmarkObserverCost measures the observers themselves. The machine's speed drifts between runs by more
// than that cost, and a garbage collection lands on whatever runs
// meanwhile, so one run alternates blocks of 500 requests between a
// purgatory with the observer and one without (each with 100,000
// operations pending) and reports the median time per request of each
// one's blocks, and the median ratio of adjacent blocks.
//
// At once, each request is completed by CheckAndComplete right after its
// park, its cache lines still at hand. Delayed, as in perf run C, each
// request is parked on three keys of 100 and ForceComplete completes the
// one parked 50,000 requests earlier, whose lines have gone cold.
func BenchmarkObserver(b *testing.B) {
	b.Run("completion=at-once", func(b *testing.B) {
		benchObserver(b, func(p *purgatory.Purgatory[tpKey, *benchOp], _ int, i int32) {
			watchAndComplete(b, p, 0, i)
		})
	})
	b.Run("completion=delayed", func(b *testing.B) {
		const lag = 50_000
		var rings [2][lag]*benchOp
		r := rand.New(rand.NewPCG(7, 7))
		benchObserver(b, func(p *purgatory.Purgatory[tpKey, *benchOp], which int, i int32) {
			o := newBenchOp(30 * time.Second)
			if done, err := p.TryCompleteElseWatch(o, tpKey{Topic: "c", Partition: r.Int32N(100)},
				tpKey{Topic: "c", Partition: r.Int32N(100)}, tpKey{Topic: "c", Partition: r.Int32N(100)}); err != nil || done {
				b.Fatal("not parked", err)
			}
			slot := &rings[which][int(i)%lag]
			if old := *slot; old != nil && !old.ForceComplete() {
				b.Fatal("not completed")
			}
			*slot = o
		})
	})
}

// benchObserver runs step for request i on the purgatory with a timeSum
// observer (which 1) or the one without (which 0), in alternating blocks.
func benchObserver(b *testing.B, step func(p *purgatory.Purgatory[tpKey, *benchOp], which int, i int32)) {
	ps := [2]*purgatory.Purgatory[tpKey, *benchOp]{
		newBenchPurgatory(b, 100_000),
		newBenchPurgatory(b, 100_000, purgatory.WithObserver(new(timeSum))),
	}
	const block = 500
	var blocks [2][]time.Duration
	which, start := 0, time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := int32(0); b.Loop(); i++ {
		if i%block == 0 && i > 0 {
			now := time.Now()
			blocks[which] = append(blocks[which], now.Sub(start))
			which, start = 1-which, now
		}
		step(ps[which], which, i)
	}
	n := min(len(blocks[0]), len(blocks[1]))
	if n == 0 {
		return // too few iterations to compare
	}
	ratios := make([]float64, n)
	for i := range n {
		ratios[i] = float64(blocks[1][i]) / float64(blocks[0][i])
	}
	b.ReportMetric(float64(median(blocks[1]))/block, "on-ns/req")
	b.ReportMetric(float64(median(blocks[0]))/block, "off-ns/req")
	b.ReportMetric(median(ratios), "on/off")
}

func median[T int64 | float64 | time.Duration](v []T) T {
	slices.Sort(v)
	return v[len(v)/2]
}

// bareOp has no fields of its own: all its heap is the library's.
type bareOp struct{ operation.Base }

func (*bareOp) TryComplete() bool { return false }
func (*bareOp) OnComplete()       {}
func (*bareOp) OnExpiration()     {}

// BenchmarkHeapPerParkedOperation reports the heap one parked operation
// costs, purgatory and timer together, with 1,000,000 parked on three keys
// each out of 100, as in Kafka's TestPurgatoryPerformance. The operation
// has no fields of its own, so every byte counted is the library's.
func BenchmarkHeapPerParkedOperation(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		p, err := purgatory.New[tpKey, *bareOp]("heap")
		if err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 1))
		ops := make([]*bareOp, n)
		before := heapAlloc() // after the benchmark's own slice
		for i := range ops {
			o := &bareOp{}
			o.Init(o, time.Hour)
			ops[i] = o
			if _, err := p.TryCompleteElseWatch(o, tpKey{Topic: "t", Partition: r.Int32N(100)},
				tpKey{Topic: "t", Partition: r.Int32N(100)}, tpKey{Topic: "t", Partition: r.Int32N(100)}); err != nil {
				b.Fatal(err)
			}
		}
		after := heapAlloc()
		b.ReportMetric(float64(after-before)/n, "heap-B/op")
		runtime.KeepAlive(ops)
		_ = p.Shutdown(context.Background())
	}
}

func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkHeartbeat keeps 10,000 member sessions alive, one heartbeat per
// iteration, two ways: moving the one parked operation's deadline
// (ResetTimeout), or Kafka's way, completing it and parking a new one on
// the member's key. Sessions are 10 s long on the purgatory's own timer,
// so each is staged by the timer when parked, as a real session is.
func BenchmarkHeartbeat(b *testing.B) {
	const members = 10_000
	const session = 10 * time.Second
	type memberKey = operation.MemberKey
	for _, way := range []string{"reset", "repark"} {
		b.Run("way="+way, func(b *testing.B) {
			p, err := purgatory.New[memberKey, *benchOp]("bench")
			if err != nil {
				b.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			keys := make([]memberKey, members)
			ops := make([]*benchOp, members)
			for i := range keys {
				keys[i] = memberKey{GroupID: "g" + strconv.Itoa(i%100), MemberID: "m" + strconv.Itoa(i)}
				ops[i] = newBenchOp(session)
				if _, err := p.TryCompleteElseWatch(ops[i], keys[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				m := i % members
				if way == "reset" {
					if !p.ResetTimeout(ops[m], session) {
						b.Fatal("session lost")
					}
					continue
				}
				ops[m].ForceComplete()
				ops[m] = newBenchOp(session)
				if _, err := p.TryCompleteElseWatch(ops[m], keys[m]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if n := p.NumDelayed(); n != members {
				b.Fatalf("%d sessions pending, want %d", n, members)
			}
		})
	}
}

// BenchmarkHeapPerKeyedOperation reports the heap one parked operation
// costs, the operation included (Base alone, 80 bytes), when its keys are
// its own, as in a service that parks waiters on job or request IDs: 100,000
// operations, each on one key or three keys no other operation watches,
// and, for comparison, each on 3 of 300 keys they share. The keys'
// strings are made before the count starts.
func BenchmarkHeapPerKeyedOperation(b *testing.B) {
	const n = 100_000
	for _, c := range []struct {
		name string
		keys func(i int, all []string) []string
		made int // keys to make
	}{
		{"keys=1-own", func(i int, all []string) []string { return all[i : i+1] }, n},
		{"keys=3-own", func(i int, all []string) []string { return all[3*i : 3*i+3] }, 3 * n},
		{"keys=3-of-300", func(i int, all []string) []string {
			return []string{all[i%300], all[(i/300+i+1)%300], all[(2*i/300+i+2)%300]}
		}, 300},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				all := make([]string, c.made)
				for i := range all {
					all[i] = "job-" + strconv.Itoa(i)
				}
				p, err := purgatory.New[string, *bareOp]("heap")
				if err != nil {
					b.Fatal(err)
				}
				ops := make([]*bareOp, n)
				before := heapAlloc()
				for i := range ops {
					o := &bareOp{}
					o.Init(o, time.Hour)
					ops[i] = o
					if _, err := p.TryCompleteElseWatch(o, c.keys(i, all)...); err != nil {
						b.Fatal(err)
					}
				}
				after := heapAlloc()
				b.ReportMetric(float64(after-before)/n, "heap-B/op")
				runtime.KeepAlive(ops)
				runtime.KeepAlive(all)
				_ = p.Shutdown(context.Background())
			}
		})
	}
}
