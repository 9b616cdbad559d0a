package lincheck

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/purgatory-go/purgatory/timer"
)

// The timer alone: tasks that embed timer.TaskBase on one MockTimer, added,
// cancelled and advanced from several goroutines, checked one task at a
// time against docs/timer.md: Add of a pending task moves it, Cancel
// reports whether it prevented a pending run and leaves IsCancelled true
// until the next Add, a task runs in the first Advance whose clock passes
// its deadline (unless cancelled or added again meanwhile), with the clock
// at its deadline (an Advance stops at each deadline on its way, so an Add
// made during one reads any time the Advance passes), and at rest Size
// counts exactly what is pending.

type tkind uint8

const (
	tInit     tkind = iota
	tAdd            // Add(task) with its delay
	tCancel         // Cancel() -> prevented a run
	tRun            // Run: fired in an Advance
	tAdvStart       // Advance(d): the clock moves
	tAdvEnd         // the same Advance returns
	tFinal          // at rest: IsCancelled()
)

type tin struct {
	kind tkind
	task int
	d    int64 // Add's delay, Advance's duration
	idx  int   // Advance id
}

type tout struct{ ok bool }

type tstate struct {
	clock int64
	// hi is where the Advance under way (adv, 0 if none) takes the clock:
	// a MockTimer's Advance stops at each deadline on its way and runs
	// the tasks due there, so an Add made meanwhile reads any time from
	// clock to hi, and a Run moves the clock to its deadline. Advances
	// take turns, one whole before the next. Without one, hi is clock.
	hi        int64
	adv       int
	pending   bool
	deadline  int64
	cancelled bool // IsCancelled
}

func tstep(state, input, output any) []any {
	s, in, out := state.(tstate), input.(tin), output.(tout)
	switch in.kind {
	case tInit:
		return []any{s}
	case tAdd:
		var next []any
		for c := s.clock; c <= s.hi; c++ {
			n := s
			n.clock = c
			n.pending, n.deadline, n.cancelled = true, c+max(in.d, 0), false
			next = append(next, n)
		}
		return next
	case tCancel:
		if out.ok != s.pending {
			return nil
		}
		s.pending, s.cancelled = false, true
		return []any{s}
	case tRun:
		// At its deadline: the Advance that passes it stops there.
		if !s.pending || s.deadline > s.hi {
			return nil
		}
		s.clock = max(s.clock, s.deadline)
		s.pending = false
		return []any{s}
	case tAdvStart:
		if s.adv != 0 {
			return nil
		}
		if in.idx == 0 { // trimAdvances' stand-in for Advances it dropped
			s.clock += in.d
			s.hi = s.clock
			return []any{s}
		}
		s.adv, s.hi = in.idx, s.clock+in.d
		return []any{s}
	case tAdvEnd:
		// The Advance has run every task due by its end.
		if s.adv != in.idx || s.pending && s.deadline <= s.hi {
			return nil
		}
		s.clock, s.adv = s.hi, 0
		return []any{s}
	case tFinal:
		if out.ok != s.cancelled {
			return nil
		}
		return []any{s}
	}
	return nil
}

func describeTin(in tin, out tout) string {
	switch in.kind {
	case tAdd:
		return fmt.Sprintf("add(t%d, delay %d)", in.task, in.d)
	case tCancel:
		return fmt.Sprintf("cancel(t%d) -> %v", in.task, out.ok)
	case tRun:
		return fmt.Sprintf("run(t%d)", in.task)
	case tAdvStart:
		return fmt.Sprintf("advance#%d(%d)", in.idx, in.d)
	case tAdvEnd:
		return fmt.Sprintf("advanceEnd#%d", in.idx)
	case tFinal:
		return fmt.Sprintf("t%d.IsCancelled() -> %v", in.task, out.ok)
	}
	return fmt.Sprintf("init(t%d)", in.task)
}

func timerModel(parts [][]porcupine.Operation) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition:         func([]porcupine.Operation) [][]porcupine.Operation { return parts },
		Init:              func() []any { return []any{tstate{}} },
		Step:              tstep,
		Equal:             func(a, b any) bool { return a.(tstate) == b.(tstate) },
		DescribeOperation: func(in, out any) string { return describeTin(in.(tin), out.(tout)) },
		DescribeState: func(state any) string {
			s := state.(tstate)
			return fmt.Sprintf("clock=%d pending=%v deadline=%d cancelled=%v", s.clock, s.pending, s.deadline, s.cancelled)
		},
	}
	return nm.ToModel()
}

// ttask is a timer task that records its runs.
type ttask struct {
	timer.TaskBase
	h    *thist
	id   int
	mu   sync.Mutex
	runs []cb
}

func (t *ttask) Run() {
	c := cb{start: stamp(), g: goid()}
	c.low, _ = t.h.workers.callStart()
	c.end = stamp()
	t.mu.Lock()
	t.runs = append(t.runs, c)
	t.mu.Unlock()
}

// tconfig is a timer workload.
type tconfig struct {
	name string
	// racing: each task is added, then cancelled on one goroutine while
	// another adds it again, the two lined up by a spin barrier.
	racing   bool
	tasks    int
	workers  int // mixed: goroutines adding and cancelling random tasks
	steps    int
	advances int // each of two advancers
}

type thist struct {
	cfg     tconfig
	seed    uint64
	mt      *timer.MockTimer
	tasks   []*ttask
	workers workers
	evs     [][]porcupine.Operation // per goroutine
	advIDs  int
	advMu   sync.Mutex

	sizeRest, sizeAfter, finalRuns int
}

func (h *thist) add(wk int, op porcupine.Operation) {
	op.ClientId = wk
	h.evs[wk] = append(h.evs[wk], op)
}

// addTask adds t with delay d; setDelay says to set it first, which only
// the goroutine that alone adds t may do (SetDelay must not race an Add).
func (h *thist) addTask(wk *worker, t *ttask, d int64, setDelay bool) {
	call := stamp()
	wk.cur.Store(call)
	if setDelay {
		t.SetDelay(time.Duration(d))
	}
	if err := h.mt.Add(t); err != nil {
		panic(err)
	}
	wk.cur.Store(0)
	h.add(wk.id, porcupine.Operation{Input: tin{kind: tAdd, task: t.id, d: d}, Output: tout{}, Call: call, Return: stamp()})
}

func (h *thist) cancelTask(wk *worker, t *ttask) {
	call := stamp()
	ok := t.Cancel()
	h.add(wk.id, porcupine.Operation{Input: tin{kind: tCancel, task: t.id}, Output: tout{ok: ok}, Call: call, Return: stamp()})
}

func (h *thist) advance(wk *worker, d int64) {
	h.advMu.Lock()
	h.advIDs++
	id := h.advIDs
	h.advMu.Unlock()
	call := stamp()
	wk.cur.Store(call)
	h.mt.Advance(time.Duration(d))
	wk.cur.Store(0)
	ret := stamp()
	h.add(wk.id, porcupine.Operation{Input: tin{kind: tAdvStart, d: d, idx: id}, Output: tout{}, Call: call, Return: ret})
	h.add(wk.id, porcupine.Operation{Input: tin{kind: tAdvEnd, idx: id}, Output: tout{}, Call: call, Return: ret})
}

func (h *thist) run() {
	cfg := h.cfg
	rng := rand.New(rand.NewPCG(h.seed, 7))
	h.mt = timer.NewMockTimer()
	for i := range cfg.tasks {
		h.tasks = append(h.tasks, &ttask{h: h, id: i})
	}
	nw := cfg.workers + 2 + 1
	h.evs = make([][]porcupine.Operation, nw+1)
	main := &worker{id: nw - 1}
	h.workers.register(main)
	delay := func(r *rand.Rand) int64 { return 1 + r.Int64N(5) }
	if cfg.racing {
		for _, t := range h.tasks {
			h.addTask(main, t, delay(rng), true)
		}
	} else {
		for _, t := range h.tasks {
			t.SetDelay(time.Duration(delay(rng))) // once, before any Add: Adds may race
		}
	}
	var wg sync.WaitGroup
	nrun := cfg.workers
	if cfg.racing {
		nrun = 2
	}
	start := &spinBarrier{n: int32(nrun + 2)}
	lockstep := &spinBarrier{n: 2}
	for w := range nrun + 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := &worker{id: w}
			h.workers.register(wk)
			r := rand.New(rand.NewPCG(h.seed, uint64(w)+11))
			start.wait()
			switch {
			case w >= nrun: // advancers
				for range cfg.advances {
					h.advance(wk, []int64{0, 1, 1, 2}[r.IntN(4)])
					runtime.Gosched()
				}
			case cfg.racing && w == 0:
				for _, t := range h.tasks {
					lockstep.wait()
					h.cancelTask(wk, t)
				}
			case cfg.racing:
				for _, t := range h.tasks {
					d := delay(r)
					lockstep.wait()
					h.addTask(wk, t, d, true)
				}
			default:
				for range cfg.steps {
					t := h.tasks[r.IntN(len(h.tasks))]
					if r.IntN(2) == 0 {
						h.addTask(wk, t, int64(t.Delay()), false)
					} else {
						h.cancelTask(wk, t)
					}
				}
			}
		}()
	}
	wg.Wait()
	// At rest: what each task says, Size, then an Advance past every
	// deadline, which must run exactly what Size counted.
	h.sizeRest = h.mt.Size()
	for _, t := range h.tasks {
		call := stamp()
		c := t.IsCancelled()
		h.add(main.id, porcupine.Operation{Input: tin{kind: tFinal, task: t.id}, Output: tout{ok: c}, Call: call, Return: stamp()})
	}
	before := h.runCount()
	h.advance(main, 1<<20)
	h.finalRuns = h.runCount() - before
	h.sizeAfter = h.mt.Size()
	_ = h.mt.Close()
}

func (h *thist) runCount() int {
	n := 0
	for _, t := range h.tasks {
		t.mu.Lock()
		n += len(t.runs)
		t.mu.Unlock()
	}
	return n
}

func (h *thist) check() []failure {
	var all []porcupine.Operation
	for _, es := range h.evs {
		all = append(all, es...)
	}
	cbClient := len(h.evs) - 1
	for _, t := range h.tasks {
		for _, r := range t.runs {
			all = append(all, porcupine.Operation{ClientId: cbClient, Input: tin{kind: tRun, task: t.id}, Output: tout{},
				Call: max(r.low, 1), Return: r.start})
		}
	}
	var parts [][]porcupine.Operation
	for _, t := range h.tasks {
		part := []porcupine.Operation{{Input: tin{kind: tInit, task: t.id}, Output: tout{}}}
		for _, e := range all {
			in := e.Input.(tin)
			if in.kind == tAdvStart || in.kind == tAdvEnd || in.task == t.id && in.kind != tInit {
				part = append(part, e)
			}
		}
		parts = append(parts, part)
	}
	shape := fmt.Sprintf("%d tasks, racing %v, %d workers x %d, 2 advancers x %d", h.cfg.tasks, h.cfg.racing, h.cfg.workers, h.cfg.steps, h.cfg.advances)
	var fails []failure
	if porcupine.CheckOperationsTimeout(timerModel(parts), nil, *checkTimeout) == porcupine.Illegal {
		var worst []porcupine.Operation
		for _, part := range parts {
			if porcupine.CheckOperationsTimeout(timerModel([][]porcupine.Operation{part}), nil, *checkTimeout) == porcupine.Illegal {
				if worst == nil || len(part) < len(worst) {
					worst = part
				}
			}
		}
		if worst != nil {
			m := timerModel([][]porcupine.Operation{worst})
			// Only the task's own events and the Advances near them: the
			// other Advances only move the clock.
			fails = append(fails, failure{kind: "linearizability: timer task", text: printOps(m, trimAdvances(worst)),
				size: len(worst), model: m, ops: worst, seed: h.seed, shape: shape})
		}
	}
	if h.sizeRest != h.finalRuns || h.sizeAfter != 0 {
		fails = append(fails, failure{kind: "invariant: timer Size exact at rest",
			text: fmt.Sprintf("  Size at rest %d, then an Advance past every deadline ran %d tasks; Size after it %d\n",
				h.sizeRest, h.finalRuns, h.sizeAfter), size: 1, seed: h.seed, shape: shape})
	}
	return fails
}

// trimAdvances drops the Advances that begin and end before the task's
// first event or after its last, except the last one (the final Advance),
// for printing: they only move the clock, which the printout then
// shows at the first kept line.
func trimAdvances(ops []porcupine.Operation) []porcupine.Operation {
	var first, last int64 = 1 << 62, 0
	for _, o := range ops {
		if k := o.Input.(tin).kind; k != tAdvStart && k != tAdvEnd && k != tInit {
			first, last = min(first, o.Call), max(last, o.Return)
		}
	}
	var out []porcupine.Operation
	var skipped int64
	for _, o := range ops {
		in := o.Input.(tin)
		if (in.kind == tAdvStart || in.kind == tAdvEnd) && o.Return < first {
			if in.kind == tAdvStart {
				skipped += in.d
			}
			continue
		}
		out = append(out, o)
	}
	if skipped > 0 {
		out = append([]porcupine.Operation{{Input: tin{kind: tAdvStart, d: skipped, idx: 0}, Output: tout{}}}, out...)
	}
	_ = last
	return out
}

func TestTimer(t *testing.T) {
	for _, cfg := range []tconfig{
		// Defect 4's race: Cancel of a pending task on one goroutine,
		// Add of it on another, at once.
		{name: "cancelreadd", racing: true, tasks: 64, advances: 4},
		// Adds and Cancels of a few tasks from three goroutines, and two
		// advancers.
		{name: "mixed", tasks: 6, workers: 3, steps: 30, advances: 15},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			hunt(t, cfg.name, func(seed uint64, shrink *rand.Rand) []failure {
				c := cfg
				if shrink != nil {
					c.tasks = max(1, c.tasks/(1+shrink.IntN(8)))
					c.steps = max(2, c.steps/(1+shrink.IntN(4)))
				}
				h := &thist{cfg: c, seed: seed}
				h.run()
				return h.check()
			})
		})
	}
}
