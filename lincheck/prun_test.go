package lincheck

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// action is what a worker does in one step.
type action uint8

const (
	aPark      action = iota // TryCompleteElseWatch of a fresh operation
	aRepark                  // TryCompleteElseWatch of one that may be parked, in flight, completed
	aSatisfy                 // make an operation ready, then (mostly) check one of its keys
	aCheck                   // CheckAndComplete(random key)
	aCheckUpTo               // CheckAndCompleteUpTo(random key, random level)
	aFC                      // ForceComplete
	aReset                   // ResetTimeout
	aCFK                     // CompleteForKey
	aCancelKey               // CancelForKey
	aCtxCancel               // cancel an operation's context
	aLocked                  // lock a SharedLock, park one of its operations (deferred), unlock
	nActions
)

// pconfig is a workload.
type pconfig struct {
	name      string
	workers   int // goroutines making calls
	steps     int // calls each
	advancers int // goroutines calling Advance
	advances  int // Advance calls each
	nkeys     int
	shared    float64 // share of operations under a SharedLock (groups of 2-3)
	leveled   float64 // share of operations that are Leveled
	ctxs      float64 // share of operations with a context of their own
	bound     int     // WithMaxPending; 0: none
	maxTO     int64   // timeouts are 0..maxTO ticks
	slowTries int     // TryComplete yields this many times (holding the operation's lock)
	// pauseForReset makes TryComplete wait, a bounded while, for a
	// ResetTimeout of its operation to return and an Advance to begin
	// after it: the window of a reset that overlaps a park.
	pauseForReset bool
	minReset      int64 // ResetTimeout's timeouts are minReset..maxReset ticks
	maxReset      int64
	minAdv        int64 // Advance moves the clock minAdv..3 ticks
	// targetInFlight is the chance that a call on an operation picks the
	// one another worker is parking at that moment.
	targetInFlight float64
	weights        [nActions]int
}

// rcall is one call a worker made.
type rcall struct {
	kind      pkind // evPark, evSatisfy, ... (evAdvStart for Advance), or evInit for an unlock
	op        int
	key       int
	level     int64
	d         int64
	cid       int   // CompleteForKey / CancelForKey call id; Advance id
	ok        bool  // park: completed in the call; FC, reset: the answer
	err       uint8 // park
	n         int   // CheckAndComplete's, CompleteForKey's count
	list      []int // CancelForKey's operations
	call, ret int64
	client    int
	g         uint64
}

// phist is one history: one purgatory, its operations, what happened.
type phist struct {
	cfg     pconfig
	seed    uint64
	mt      *timer.MockTimer
	p       *purgatory.Purgatory[int, operation.DelayedOperation]
	ops     []*top
	dops    []operation.DelayedOperation
	locks   []*operation.SharedLock
	groups  [][]int // operations of each SharedLock
	workers workers
	calls   [][]rcall // per worker

	fresh    atomic.Int32 // next operation never parked
	inFlight atomic.Int32 // an operation being parked right now, +1 (0: none)
	cids     atomic.Int32
	advIDs   atomic.Int32
	advAt    atomic.Int64 // the stamp of the latest Advance call
	// hw is each key's level, which only rises: CheckAndCompleteUpTo is
	// given a key's level after the test raised it, as docs/purgatory.md
	// asks ("Levels on a key must only rise").
	hw [16]atomic.Int64

	// at rest, before Shutdown
	restCall, restRet int64
	rest              restCounts
	// Shutdown's call
	shutCall, shutRet int64
	after             restCounts
	lateErr           error // a park after Shutdown
	lateOp            int
	lateCall, lateRet int64
	settled           bool
}

type restCounts struct {
	numDelayed, watched, size int
	stats                     purgatory.Stats
}

func newPHist(cfg pconfig, seed uint64) *phist {
	h := &phist{cfg: cfg, seed: seed}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	h.mt = timer.NewMockTimer()
	opts := []purgatory.Option{purgatory.WithTimer(h.mt), purgatory.WithoutReaper(),
		purgatory.WithObserver(pobs{}), purgatory.WithShards(4)}
	if cfg.bound > 0 {
		opts = append(opts, purgatory.WithMaxPending(cfg.bound))
	}
	p, err := purgatory.New[int, operation.DelayedOperation]("lincheck", opts...)
	if err != nil {
		panic(err)
	}
	h.p = p
	nops := cfg.workers*cfg.steps + 1 // and one for the park after Shutdown
	for i := range nops {
		o := &top{h: h, id: i, timeout: time.Duration(rng.Int64N(cfg.maxTO + 1))}
		nk := 1 + rng.IntN(min(3, cfg.nkeys))
		perm := rng.Perm(cfg.nkeys)
		o.keys = perm[:nk]
		var self operation.DelayedOperation = o
		if rng.Float64() < cfg.leveled {
			o.lv.leveled, o.lv.n = true, nk
			for j, k := range o.keys {
				o.lv.keys[j], o.lv.lvls[j] = k, rng.Int64N(4)
			}
			lo := &ltop{}
			lo.top = top{h: h, id: i, timeout: o.timeout, keys: o.keys, lv: o.lv}
			o, self = &lo.top, lo
		}
		var iopts []operation.InitOption
		if rng.Float64() < cfg.ctxs {
			o.ctx, o.cancel = context.WithCancelCause(context.Background())
			iopts = append(iopts, operation.WithContext(o.ctx))
		}
		if i < nops-1 && rng.Float64() < cfg.shared {
			g := len(h.groups) - 1
			if g < 0 || len(h.groups[g]) >= 2+int(seed%2) {
				h.locks = append(h.locks, &operation.SharedLock{})
				h.groups = append(h.groups, nil)
				g++
			}
			o.lock = h.locks[g]
			h.groups[g] = append(h.groups[g], i)
			iopts = append(iopts, operation.WithLock(o.lock))
		}
		initOp(self, o.timeout, iopts)
		h.ops = append(h.ops, o)
		h.dops = append(h.dops, self)
	}
	return h
}

func initOp(self operation.DelayedOperation, timeout time.Duration, opts []operation.InitOption) {
	switch v := self.(type) {
	case *top:
		v.Init(v, timeout, opts...)
	case *ltop:
		v.Init(v, timeout, opts...)
	}
}

// run runs the history: workers and advancers at once, then the rest
// point, Shutdown, and a park after it.
func (h *phist) run() {
	cfg := h.cfg
	nw := cfg.workers + cfg.advancers
	h.calls = make([][]rcall, nw+1)
	var wg sync.WaitGroup
	start := &spinBarrier{n: int32(nw)}
	for w := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := &worker{id: w}
			h.workers.register(wk)
			rng := rand.New(rand.NewPCG(h.seed, uint64(w)+1))
			start.wait()
			if w < cfg.workers {
				for range cfg.steps {
					h.step(wk, rng)
				}
			} else {
				for range cfg.advances {
					h.advance(wk, rng)
					if rng.IntN(2) == 0 {
						runtime.Gosched()
					}
				}
			}
		}()
	}
	wg.Wait()
	h.settle()
	main := &worker{id: nw}
	h.workers.register(main)
	h.finish(main)
}

// finish takes the counts at rest, shuts the purgatory down, and parks
// one operation after that.
func (h *phist) finish(main *worker) {
	h.restCall = stamp()
	h.rest = h.counts()
	h.restRet = stamp()

	h.shutCall = stamp()
	main.cur.Store(h.shutCall)
	if err := h.p.Shutdown(context.Background()); err != nil {
		panic(err)
	}
	main.cur.Store(0)
	h.shutRet = stamp()
	h.after = h.counts()

	h.lateOp = len(h.ops) - 1
	h.lateCall = stamp()
	_, h.lateErr = h.p.TryCompleteElseWatch(h.dops[h.lateOp], h.ops[h.lateOp].keys...)
	h.lateRet = stamp()
	for _, o := range h.ops {
		if o.cancel != nil {
			o.cancel(nil)
		}
	}
}

func (h *phist) counts() restCounts {
	return restCounts{numDelayed: h.p.NumDelayed(), watched: h.p.Watched(), size: h.mt.Size(), stats: h.p.Stats()}
}

// settle waits, a bounded while, for what runs on goroutines the test
// does not own: the completions that cancelled contexts start.
func (h *phist) settle() {
	until := time.Now().Add(5 * time.Second)
	for {
		busy := false
		for _, o := range h.ops {
			if o.cancel == nil || o.ctxAt.Load() == 0 || o.IsCancelled() {
				continue
			}
			if !h.accepted(o.id) {
				continue
			}
			o.mu.Lock()
			done := len(o.rec.complete) > 0
			o.mu.Unlock()
			if !done {
				busy = true
				break
			}
		}
		if !busy {
			// The goroutine that ran a context's completion holds the
			// operation's SharedLock until the completion returns, and
			// after its unlock it makes the checks that found the lock
			// held (a park's, say): they may complete another operation
			// of the group after the completion above is recorded, and
			// nothing of the history shows them coming. Each such check
			// takes the lock, so taking and letting go of every lock
			// until a round completes nothing waits for them (one that
			// finds this goroutine holding the lock leaves its note,
			// which the Unlock here runs).
			for {
				before := h.completions()
				for _, l := range h.locks {
					l.Lock()
					l.Unlock()
				}
				if h.completions() == before {
					break
				}
			}
			h.settled = true
			return
		}
		if time.Now().After(until) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// completions counts the OnComplete calls recorded so far.
func (h *phist) completions() int {
	n := 0
	for _, o := range h.ops {
		o.mu.Lock()
		n += len(o.rec.complete)
		o.mu.Unlock()
	}
	return n
}

// accepted reports whether a TryCompleteElseWatch of operation i returned
// no error.
func (h *phist) accepted(i int) bool {
	for _, cs := range h.calls {
		for _, c := range cs {
			if c.kind == evPark && c.op == i && c.err == errNone {
				return true
			}
		}
	}
	return false
}

func (h *phist) record(wk *worker, c rcall) {
	c.client = wk.id
	h.calls[wk.id] = append(h.calls[wk.id], c)
}

// begin stamps the start of a call and marks the worker as in it.
func (h *phist) begin(wk *worker) int64 {
	s := stamp()
	wk.cur.Store(s)
	return s
}

func (h *phist) end(wk *worker) int64 {
	wk.cur.Store(0)
	return stamp()
}

func (h *phist) advance(wk *worker, rng *rand.Rand) {
	h.advanceBy(wk, max([]int64{0, 1, 1, 2, 3}[rng.IntN(5)], h.cfg.minAdv))
}

func (h *phist) advanceBy(wk *worker, d int64) {
	id := int(h.advIDs.Add(1))
	c := rcall{kind: evAdvStart, op: -1, d: d, cid: id}
	c.call = h.begin(wk)
	h.advAt.Store(c.call)
	c.n = h.mt.Advance(time.Duration(d))
	c.ret = h.end(wk)
	h.record(wk, c)
}

// pickOp returns an operation for a call on one: often the one being
// parked at this moment, if the workload targets those.
func (h *phist) pickOp(rng *rand.Rand) int {
	if f := h.inFlight.Load(); f > 0 && rng.Float64() < h.cfg.targetInFlight {
		return int(f - 1)
	}
	n := int(h.fresh.Load())
	if n == 0 || rng.IntN(8) == 0 {
		return rng.IntN(len(h.ops) - 1)
	}
	return rng.IntN(min(n+1, len(h.ops)-1))
}

func (h *phist) pickAction(rng *rand.Rand) action {
	total := 0
	for _, w := range h.cfg.weights {
		total += w
	}
	r := rng.IntN(total)
	for a, w := range h.cfg.weights {
		if r < w {
			return action(a)
		}
		r -= w
	}
	return aCheck
}

func (h *phist) step(wk *worker, rng *rand.Rand) {
	switch a := h.pickAction(rng); a {
	case aPark:
		i := int(h.fresh.Add(1)) - 1
		if i >= len(h.ops)-1 {
			i = h.pickOp(rng)
		}
		h.park(wk, i)
	case aRepark:
		h.park(wk, h.pickOp(rng))
	case aSatisfy:
		i := h.pickOp(rng)
		o := h.ops[i]
		c := rcall{kind: evSatisfy, op: i}
		c.call = h.begin(wk)
		o.ready.Store(true)
		c.ret = h.end(wk)
		h.record(wk, c)
		if rng.IntN(4) != 0 {
			k := o.keys[rng.IntN(len(o.keys))]
			if o.lv.leveled && rng.IntN(2) == 0 {
				h.checkUpTo(wk, k, o.WatchLevelOf(k)+rng.Int64N(2))
			} else {
				h.checkKey(wk, k)
			}
		}
	case aCheck:
		h.checkKey(wk, rng.IntN(h.cfg.nkeys))
	case aCheckUpTo:
		h.checkUpTo(wk, rng.IntN(h.cfg.nkeys), rng.Int64N(4))
	case aFC:
		i := h.pickOp(rng)
		c := rcall{kind: evFC, op: i}
		c.call = h.begin(wk)
		c.ok = h.dops[i].ForceComplete()
		c.ret = h.end(wk)
		h.record(wk, c)
	case aReset:
		i := h.pickOp(rng)
		d := h.cfg.minReset + rng.Int64N(h.cfg.maxReset-h.cfg.minReset+1)
		c := rcall{kind: evReset, op: i, d: d}
		c.call = h.begin(wk)
		c.ok = h.p.ResetTimeout(h.dops[i], time.Duration(d))
		c.ret = h.end(wk)
		if c.ok {
			h.ops[i].resetAt.Store(c.ret)
		}
		h.record(wk, c)
	case aCFK:
		k := rng.IntN(h.cfg.nkeys)
		cid := int(h.cids.Add(1))
		c := rcall{kind: evCFK, op: -1, key: k, cid: cid}
		c.call = h.begin(wk)
		c.n = h.p.CompleteForKey(k, &cfkErr{cid})
		c.ret = h.end(wk)
		h.record(wk, c)
	case aCancelKey:
		k := rng.IntN(h.cfg.nkeys)
		cid := int(h.cids.Add(1))
		c := rcall{kind: evCancelKey, op: -1, key: k, cid: cid}
		c.call = h.begin(wk)
		got := h.p.CancelForKey(k)
		c.ret = h.end(wk)
		for _, op := range got {
			c.list = append(c.list, op.(tapped).self().id)
		}
		h.record(wk, c)
	case aCtxCancel:
		i := h.pickOp(rng)
		o := h.ops[i]
		if o.cancel == nil {
			h.checkKey(wk, o.keys[0])
			return
		}
		c := rcall{kind: evCtxCancel, op: i}
		c.call = h.begin(wk)
		o.ctxAt.CompareAndSwap(0, c.call)
		o.cancel(errCtx)
		c.ret = h.end(wk)
		h.record(wk, c)
	case aLocked:
		if len(h.groups) == 0 {
			h.checkKey(wk, rng.IntN(h.cfg.nkeys))
			return
		}
		g := rng.IntN(len(h.groups))
		l := h.locks[g]
		l.Lock()
		// A park made under the held lock is deferred to the unlock.
		ops := h.groups[g]
		i := ops[rng.IntN(len(ops))]
		if rng.IntN(2) == 0 {
			i = h.freshOf(ops, i)
		}
		h.park(wk, i)
		for range rng.IntN(3) {
			runtime.Gosched()
		}
		c := rcall{kind: evInit, op: -1} // the unlock: no event of the model
		c.call = h.begin(wk)
		l.Unlock()
		c.ret = h.end(wk)
		h.record(wk, c)
	}
}

// freshOf returns an operation of ops that no worker has parked, or i.
func (h *phist) freshOf(ops []int, i int) int {
	for _, j := range ops {
		if !h.touched(j) {
			return j
		}
	}
	return i
}

func (h *phist) touched(i int) bool {
	return h.ops[i].IsCompleted() || h.ops[i].IsCancelled()
}

// WatchLevelOf is the operation's level on key (0 if not Leveled).
func (o *top) WatchLevelOf(key int) int64 {
	for i := range o.lv.n {
		if o.lv.keys[i] == key {
			return o.lv.lvls[i]
		}
	}
	return 0
}

func (h *phist) park(wk *worker, i int) {
	c := rcall{kind: evPark, op: i}
	h.inFlight.Store(int32(i) + 1)
	c.call = h.begin(wk)
	c.g = goid()
	done, err := h.p.TryCompleteElseWatch(h.dops[i], h.ops[i].keys...)
	c.ret = h.end(wk)
	h.inFlight.CompareAndSwap(int32(i)+1, 0)
	c.ok = done
	switch {
	case err == nil:
		c.err = errNone
	case errors.Is(err, purgatory.ErrFull):
		c.err = errFull
	case errors.Is(err, purgatory.ErrAlreadyWatched):
		c.err = errAlready
	case errors.Is(err, purgatory.ErrShutdown):
		c.err = errShutdown
	default:
		c.err = errOther
	}
	h.record(wk, c)
}

func (h *phist) checkKey(wk *worker, k int) {
	c := rcall{kind: evCheck, op: -1, key: k}
	c.call = h.begin(wk)
	c.g = goid()
	c.n = h.p.CheckAndComplete(k)
	c.ret = h.end(wk)
	h.record(wk, c)
}

func (h *phist) checkUpTo(wk *worker, k int, level int64) {
	for {
		cur := h.hw[k].Load()
		if level <= cur {
			level = cur
			break
		}
		if h.hw[k].CompareAndSwap(cur, level) {
			break
		}
	}
	c := rcall{kind: evCheckUpTo, op: -1, key: k, level: level}
	c.call = h.begin(wk)
	c.g = goid()
	c.n = h.p.CheckAndCompleteUpTo(k, level)
	c.ret = h.end(wk)
	h.record(wk, c)
}
