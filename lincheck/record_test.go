package lincheck

import (
	"flag"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

var (
	duration = flag.Duration("lincheck.duration", 500*time.Millisecond,
		"how long each workload runs histories (make lincheck runs longer)")
	seedFlag = flag.Int64("lincheck.seed", 0,
		"seed of the first history (0: from the clock); each history is seed+i")
	checkTimeout = flag.Duration("lincheck.timeout", 20*time.Second,
		"porcupine's time limit for one history; Unknown counts as passing")
	visualize = flag.Bool("lincheck.visualize", true,
		"write porcupine's visualization of the smallest failing history")
)

// ticks is the logical clock every call and callback is stamped with: an
// event whose stamp is lower happened before one whose stamp is higher.
var ticks atomic.Int64

func stamp() int64 { return ticks.Add(1) }

// goid returns the running goroutine's id, parsed from its stack header
// ("goroutine 18 [running]:"). Tests only: it tells on which worker's call
// a callback runs.
func goid() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	var id uint64
	for _, c := range buf[len("goroutine "):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

// worker is a goroutine of a history. cur is the stamp of the call it is
// in (0 between calls): a callback that runs on a worker ran inside that
// call, so the call's stamp is a lower bound for what the callback saw.
type worker struct {
	id  int
	cur atomic.Int64
}

// workers maps goroutine ids to the workers running on them.
type workers struct{ m sync.Map }

func (w *workers) register(wk *worker) { w.m.Store(goid(), wk) }

// callStart returns the stamp of the call the running goroutine is in, if
// it is a worker in a call.
func (w *workers) callStart() (int64, bool) {
	v, ok := w.m.Load(goid())
	if !ok {
		return 0, false
	}
	s := v.(*worker).cur.Load()
	return s, s != 0
}

// spinBarrier lines n goroutines up, spinning, so that what each does
// next overlaps as closely as two cores allow.
type spinBarrier struct {
	n       int32
	arrived atomic.Int32
	round   atomic.Int32
}

func (b *spinBarrier) wait() {
	r := b.round.Load()
	if b.arrived.Add(1) == b.n {
		b.arrived.Store(0)
		b.round.Add(1)
		return
	}
	for b.round.Load() == r {
		runtime.Gosched()
	}
}
