// Command purgatory_perf is a port of Kafka's TestPurgatoryPerformance: it
// parks requests in a purgatory at a Poisson rate, completes those whose
// simulated latency (log-normal) is below the timeout at arrival + latency,
// lets the rest expire, and reports rate, CPU, GC, memory and expiry
// lateness. With -impl=naive it runs the same load against a naive
// purgatory (one mutex around a map of slices, one time.AfterFunc per
// request), so that every figure can be compared within one machine; with
// -impl=floor, against what the workload costs by itself (floor.go).
//
//	cd examples && go run ./purgatory_perf -num 1000000 -rate 0 -timeout 1000 -pct50 50 -pct75 75
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type config struct {
	num, keys, keySpace int
	producers           int     // goroutines parking requests, each its share
	rate                float64 // requests per second; 0 for as fast as possible
	timeout             time.Duration
	pct50, pct75        float64 // milliseconds
	size                int
	impl                string
	verbose             bool
	timeline            string // file for the lateness time line, or ""
}

func main() {
	var c config
	var timeoutMs int64
	flag.IntVar(&c.num, "num", 1_000_000, "number of requests")
	flag.IntVar(&c.producers, "producers", 1, "goroutines parking requests: each parks its share of -num, at its share of -rate, on the same keys (for a machine with more cores than this one: docs/benchmarks.md, \"Many cores\")")
	flag.Float64Var(&c.rate, "rate", 0, "request rate per second (0: as fast as the generator can go)")
	flag.IntVar(&c.keys, "keys", 3, "number of keys each request is watched on")
	flag.IntVar(&c.keySpace, "key-space-size", 100, "number of possible keys")
	flag.Int64Var(&timeoutMs, "timeout", 1000, "request timeout in ms")
	flag.Float64Var(&c.pct50, "pct50", 50, "50th percentile of request latency in ms (log-normal)")
	flag.Float64Var(&c.pct75, "pct75", 75, "75th percentile of request latency in ms (log-normal)")
	flag.IntVar(&c.size, "size", 0, "bytes of payload each request carries")
	flag.StringVar(&c.impl, "impl", "purgatory", "purgatory, naive, or floor (the workload's own cost: no watch lists, a timer only for requests that will expire)")
	flag.IntVar(&executors, "executors", 0, "purgatory: goroutines running expired operations (0: the reaper runs them, the purgatory's default)")
	flag.BoolVar(&timeInPurgatory, "times", false, "purgatory: record the time in purgatory (a timing.Recorder installed with purgatory.WithObserver)")
	flag.BoolVar(&c.verbose, "verbose", true, "print the samples' statistics and a header")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	traceFile := flag.String("trace", "", "write an execution trace of the run to this file (go tool trace)")
	flag.StringVar(&c.timeline, "timeline", "", "write, for every 10 ms of the run, the requests that expired in it, the largest lateness among them (also counted from the end of each request's park), the longest park among them and the GC cycles that ended in it, to this file")
	flag.StringVar(&memProfile, "memprofile", "", "write a heap profile, taken when the most requests were pending, to this file")
	flag.Parse()
	c.timeout = time.Duration(timeoutMs) * time.Millisecond
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "purgatory_perf:", err)
		flag.Usage()
		os.Exit(2)
	}
	defer record(*cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile)()
	defer record(*traceFile, trace.Start, trace.Stop)()
	r := run(c)
	r.print(c, os.Stdout)
}

// record starts writing a CPU profile or an execution trace to the named
// file, if a name is given, and returns what stops it.
func record(name string, start func(io.Writer) error, stop func()) func() {
	if name == "" {
		return func() {}
	}
	f, err := os.Create(name)
	if err == nil {
		err = start(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "purgatory_perf:", err)
		os.Exit(1)
	}
	return func() {
		stop()
		f.Close()
	}
}

func (c config) validate() error {
	switch {
	case c.num <= 0:
		return fmt.Errorf("-num must be positive")
	case c.producers < 0 || c.producers > c.num:
		return fmt.Errorf("-producers must be from 1 to -num")
	case c.keys <= 0 || c.keySpace <= 0:
		return fmt.Errorf("-keys and -key-space-size must be positive")
	case c.rate < 0:
		return fmt.Errorf("-rate must not be negative")
	case c.timeout <= 0:
		return fmt.Errorf("-timeout must be positive")
	case c.pct50 <= 0 || c.pct75 < c.pct50:
		return fmt.Errorf("need 0 < -pct50 <= -pct75")
	case c.impl != "purgatory" && c.impl != "naive" && c.impl != "floor":
		return fmt.Errorf("-impl must be purgatory, naive or floor")
	}
	return nil
}

// request is what both implementations' operations carry: the user's own
// fields, as far as memory accounting goes. It is kept small (the payload
// behind a pointer, the tracker a package variable), so that the tool's
// own allocation does not dominate what it measures.
type request struct {
	id          int32
	arrival     time.Duration // monotonic, since the tool started
	completesAt time.Duration
	payload     *[]byte // -size bytes, or nil
}

var epoch = time.Now()

func now() time.Duration { return time.Since(epoch) }

// tracker collects what the operations report.
type tracker struct {
	remaining sync.WaitGroup
	completed atomic.Int64
	expired   atomic.Int64
	late      []int64 // per request id: expiry lateness in ns, or MinInt64
	expiredAt []int64 // per request id: when it expired (now()), with -timeline
	parkedAt  []int64 // per request id: when its park returned (now()), with -timeline
	timeout   time.Duration
}

// onComplete counts a completion. A request that is expiring is counted
// done by onExpire, which comes after it, so that the run does not end
// before its lateness is recorded.
func (t *tracker) onComplete(expiring bool) {
	t.completed.Add(1)
	if !expiring {
		t.remaining.Done()
	}
}

func (t *tracker) onExpire(r *request) {
	n := now()
	t.late[r.id] = int64(n - (r.arrival + t.timeout))
	if t.expiredAt != nil {
		t.expiredAt[r.id] = int64(n)
	}
	t.expired.Add(1)
	t.remaining.Done()
}

var (
	executors       int
	timeInPurgatory bool
)

// track is the run's tracker, shared by every operation.
var track *tracker

// parker is the part of a purgatory the tool drives. park returns the
// operation if it was parked rather than completed at once.
type parker[O completer] interface {
	park(r request, keys []string) (O, bool, error)
	pending() int
	shutdown()
}

// completer completes a parked request early.
type completer interface{ forceComplete() bool }

type result struct {
	elapsed, genTime         time.Duration
	targetRate, actualRate   float64
	cpu                      time.Duration
	gcCount                  uint32
	gcPause                  time.Duration
	peakRSS                  int64 // bytes
	peakPending              int
	heapPerPending           float64 // bytes of heap per pending request, sampled at peak
	completed, expired       int64
	lateP50, lateP99, lateMx time.Duration
	early                    int
	latencyP50, latencyP75   float64
}

func run(c config) result {
	switch c.impl {
	case "naive":
		return runWith(c, newNaive())
	case "floor":
		return runWith(c, &floor{})
	}
	return runWith(c, newReal())
}

func runWith[O completer](c config, p parker[O]) result {
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	latency := newLogNormal(rnd, c.pct50, c.pct75)
	keys := make([]string, c.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("fakeKey%d", rnd.IntN(c.keySpace))
	}
	t := &tracker{late: make([]int64, c.num), timeout: c.timeout}
	for i := range t.late {
		t.late[i] = math.MinInt64
	}
	if c.timeline != "" {
		t.expiredAt = make([]int64, c.num)
		t.parkedAt = make([]int64, c.num)
	}
	track = t
	cq := newCompletionQueue[O](c.timeout)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap, gc0, pause0 := ms.HeapAlloc, ms.NumGC, ms.PauseTotalNs
	cpu0 := processCPU()

	// Sample the pending count and heap while the load runs.
	var peakPending atomic.Int64
	var heapAtPeak atomic.Uint64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
			}
			if n := int64(p.pending()); n > peakPending.Load() {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peakPending.Store(n)
				heapAtPeak.Store(m.HeapAlloc)
				if memProfile != "" {
					writeHeapProfile(memProfile)
				}
			}
		}
	}()

	t.remaining.Add(c.num)
	start := now()
	// Each producer parks the requests whose ids are its own (i mod
	// producers), on the same keys, with a generator of its own; the last
	// scheduled time of any is the run's.
	var scheduled atomic.Int64
	var running sync.WaitGroup
	producers := max(c.producers, 1) // zero: one
	rnds := []*rand.Rand{rnd}
	for w := 1; w < producers; w++ {
		rnds = append(rnds, rand.New(rand.NewPCG(rnd.Uint64(), uint64(w))))
	}
	for w, wrnd := range rnds {
		running.Add(1)
		go func() {
			defer running.Done()
			at := start
			for i := w; i < c.num; i += producers {
				if c.rate > 0 {
					at += time.Duration(wrnd.ExpFloat64() / (c.rate / float64(producers)) * float64(time.Second))
					if d := at - now(); d > 0 {
						time.Sleep(d)
					}
				}
				arrival := now()
				latency := latency.next(wrnd)
				r := request{id: int32(i), arrival: arrival, completesAt: arrival + latency}
				if c.size > 0 {
					b := make([]byte, c.size)
					r.payload = &b
				}
				op, parked, err := p.park(r, keys)
				if err != nil {
					panic(err)
				}
				if t.parkedAt != nil {
					// Read once every goroutine is done: running.Wait and
					// t.remaining.Wait order it before writeTimeline.
					t.parkedAt[i] = int64(now())
				}
				if latency < c.timeout && parked {
					cq.add(op, r.completesAt)
				}
			}
			for {
				if old := scheduled.Load(); int64(at) <= old || scheduled.CompareAndSwap(old, int64(at)) {
					break
				}
			}
		}()
	}
	running.Wait()
	genEnd := now()
	t.remaining.Wait()
	done := now()
	close(stopSampling)
	sampler.Wait()
	cq.shutdown()
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&ms)
	p.shutdown()

	res := result{
		elapsed:     done - start,
		genTime:     genEnd - start,
		actualRate:  float64(c.num) / (genEnd - start).Seconds(),
		cpu:         cpu,
		gcCount:     ms.NumGC - gc0,
		gcPause:     time.Duration(ms.PauseTotalNs - pause0),
		peakRSS:     peakRSS(),
		peakPending: int(peakPending.Load()),
		completed:   t.completed.Load(),
		expired:     t.expired.Load(),
	}
	if c.rate > 0 {
		res.targetRate = float64(c.num) / (time.Duration(scheduled.Load()) - start).Seconds()
	}
	if n := peakPending.Load(); n > 0 {
		res.heapPerPending = float64(int64(heapAtPeak.Load())-int64(baseHeap)) / float64(n)
	}
	if c.timeline != "" {
		if err := writeTimeline(c.timeline, t, start); err != nil {
			fmt.Fprintln(os.Stderr, "purgatory_perf:", err)
		}
	}
	var late []int64
	for _, l := range t.late {
		if l != math.MinInt64 {
			late = append(late, l)
		}
	}
	if len(late) > 0 {
		slices.Sort(late)
		res.lateP50 = time.Duration(late[len(late)/2])
		res.lateP99 = time.Duration(late[len(late)*99/100])
		res.lateMx = time.Duration(late[len(late)-1])
		for _, l := range late {
			if l < 0 {
				res.early++
			}
		}
	}
	sample := slices.Clone(latency.samples)
	slices.Sort(sample)
	res.latencyP50 = float64(sample[len(sample)/2]) / 1e6
	res.latencyP75 = float64(sample[len(sample)*3/4]) / 1e6
	return res
}

func (r result) print(c config, w *os.File) {
	if c.verbose {
		fmt.Fprintf(w, "# impl %s: %d requests, %d keys of %d, timeout %v, latency pct50 %.1fms pct75 %.1fms\n",
			c.impl, c.num, c.keys, c.keySpace, c.timeout, r.latencyP50, r.latencyP75)
		fmt.Fprintln(w, "# "+strings.Join([]string{"elapsed_ms", "target_rate", "actual_rate", "cpu_ms", "cpu_us_per_req",
			"gc_count", "gc_pause_ms", "peak_rss_mib", "peak_pending", "heap_B_per_pending", "completed", "expired",
			"late_p50_ms", "late_p99_ms", "late_max_ms", "early"}, "\t"))
	}
	fmt.Fprintf(w, "%d\t%.0f\t%.0f\t%d\t%.3f\t%d\t%.1f\t%.1f\t%d\t%.1f\t%d\t%d\t%.2f\t%.2f\t%.2f\t%d\n",
		r.elapsed.Milliseconds(), r.targetRate, r.actualRate, r.cpu.Milliseconds(),
		float64(r.cpu.Microseconds())/float64(c.num), r.gcCount, float64(r.gcPause.Microseconds())/1000,
		float64(r.peakRSS)/(1<<20), r.peakPending, r.heapPerPending, r.completed, r.expired,
		ms(r.lateP50), ms(r.lateP99), ms(r.lateMx), r.early)
}

var memProfile string

func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("heap").WriteTo(f, 0)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// logNormal is the distribution of request latencies: log-normal with the
// given 50th and 75th percentiles (in ms). Like Kafka's tool it draws from
// precomputed samples; Kafka keeps a million, which is 8 MB of random reads
// that would be CPU charged to the purgatory under test, so this keeps 65536
// (512 KB, which stays in cache).
type logNormal struct{ samples []time.Duration }

func newLogNormal(r *rand.Rand, pct50, pct75 float64) logNormal {
	mu := math.Log(pct50)
	sigma := (math.Log(pct75) - mu) / 0.674490 // 0.674490: 75th percentile of N(0,1)
	l := logNormal{samples: make([]time.Duration, 1<<16)}
	for i := range l.samples {
		l.samples[i] = time.Duration(math.Exp(r.NormFloat64()*sigma+mu) * float64(time.Millisecond))
	}
	return l
}

func (l logNormal) next(r *rand.Rand) time.Duration {
	return l.samples[r.Uint64()&(1<<16-1)]
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is the process's peak resident set size (Linux reports KiB).
func peakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss) * 1024
}

// completionQueue completes requests at their completion time, like the
// CompletionQueue of Kafka's tool, with the same millisecond granularity.
// Kafka's is a heap (a java.util.concurrent.DelayQueue); this is a ring of
// one-millisecond slots, so that the tool spends little of the CPU it
// measures on itself. One goroutine completes each slot once it is due.
type completionQueue[O completer] struct {
	mu    sync.Mutex
	slots [][]O // slot i holds requests due in millisecond i mod len
	next  int64 // first millisecond not yet completed
	stop  chan struct{}
	done  chan struct{}
}

func newCompletionQueue[O completer](timeout time.Duration) *completionQueue[O] {
	q := &completionQueue[O]{
		slots: make([][]O, timeout.Milliseconds()+2),
		next:  now().Milliseconds(),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go q.loop()
	return q
}

// add schedules op to complete at at, which is less than the timeout ahead.
func (q *completionQueue[O]) add(op O, at time.Duration) {
	q.mu.Lock()
	ms := max(at.Milliseconds(), q.next)
	i := ms % int64(len(q.slots))
	q.slots[i] = append(q.slots[i], op)
	q.mu.Unlock()
}

func (q *completionQueue[O]) loop() {
	defer close(q.done)
	var due []O
	for {
		select {
		case <-q.stop:
			return
		default:
		}
		q.mu.Lock()
		for end := now().Milliseconds(); q.next <= end; q.next++ {
			i := q.next % int64(len(q.slots))
			due = append(due, q.slots[i]...)
			clear(q.slots[i])
			q.slots[i] = q.slots[i][:0]
		}
		q.mu.Unlock()
		for _, op := range due {
			op.forceComplete()
		}
		clear(due)
		due = due[:0]
		time.Sleep(time.Millisecond)
	}
}

func (q *completionQueue[O]) shutdown() { close(q.stop); <-q.done }
