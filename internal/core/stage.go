package core

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Staging holds back the operations' timeouts whose deadline is far off.
// An Add of such a task, at least stageMin from its deadline, does not
// file it into a bucket: it marks the entry (Entry.Mark) and
// appends the task's Ref to a staging slice. Every stageHold the goroutine
// advancing the timer files the tasks still pending into the wheels, at
// the deadlines their Adds fixed.
//
// Only a task that is a Ref (an operation's Handle, which its completion
// clears) is staged. A task that embeds TaskBase is its own entry: a slot
// would keep it, and whatever embeds it, reachable until the drain, and
// the drain would visit each cancelled one (a cache miss each). Staged,
// BenchmarkAddCancelNewTask with a million pending took 1.07x f93bfd4's
// time; filed at once, as before, it takes what it took.
//
// Most far deadlines never come: a produce waits milliseconds for its
// replicas and has 30 s to do it, a fetch waits for bytes. Such a task is
// cancelled while staged, and its Cancel is one compare-and-swap of its
// list pointer (the mark), where a Cancel of a task in a bucket takes the
// bucket stripe's lock and writes its neighbours' links: with 1 s
// timeouts every task added within a level-2 bucket's span shares that
// bucket, and the Adds and Cancels of two cores contend for its four
// stripes. examples/purgatory_perf with -timeout 1000 -pct50 50 -pct75 75
// (docs/benchmarks.md, C) measures what it saves: at 90ac07b, against the
// same build with nothing staged, alternated, medians of 12, 1.03x the
// rate and 0.97x the CPU a request, for 1.10x the peak RSS. That is a
// small gain: drop staging if a change elsewhere makes it noise.
//
// Staged tasks are the timer's pending tasks like any other: Size counts them, an
// Advance that passes their deadlines runs them, and nothing else is put
// in the timer for them. The wait moves no deadline: a task staged late in
// a drain is filed due, and fires in the same turn.
//
// A drain is done a chunk at a time, as coarse buckets are moved down:
// when the token is due, a turn takes the staged slices out (taken), and
// each turn then files up to drainChunk of them, so that Adds run between
// turns. With a million timeouts staged, filing them all in one turn held
// the write lock for 100 ms or more, and every Add waited for it: perf run
// E then parked at two thirds of its rate (docs/benchmarks.md). Every
// staged deadline is at least stageHold after the token's tick (staged
// at least stageMin ahead, drained stageHold after the Add that armed
// the token), so filing all that is taken before any bucket due at or
// after that tick is handled (takenBy) keeps every deadline exact.
type staging struct {
	mark    List // what staged entries point to
	stripes [stageStripes]stageStripe
	// armed is set while the token is queued, or about to be: an Add that
	// stages into an unarmed staging queues it.
	armed atomic.Bool
	// token is a bucket of no entries that stands for the staging area in
	// the delay queue: when it is due, a turn drains the staging slices.
	token bucket

	// taken are the slices the token's turns took out, being filed a
	// chunk a turn from takenAt on; takenBy is the tick before which
	// nothing taken is due (math.MaxInt64 with nothing taken). Guarded by
	// the timer's write lock.
	taken   slots
	takenAt int
	takenBy int64
}

// drainChunk is how many staged tasks a turn files, as cascadeChunk is
// how many a turn moves down.
const drainChunk = 1024

const (
	// stageHold is how long a task may wait staged: the drain comes
	// stageHold after the Add that armed it.
	stageHold = 400 * time.Millisecond
	// stageMin is the shortest time to a deadline that an Add stages:
	// twice the hold, so that a drain comes well before the deadline.
	stageMin = 2 * stageHold
	// stageStripes is how many slices, picked by the entry's address,
	// concurrent Adds spread over.
	stageStripes = 16
	// stageChunk is how many Refs a chunk of a stripe holds (2 KiB).
	stageChunk = 256
)

type stageStripe struct {
	mu sync.Mutex
	// refs is guarded by mu. It holds the staged tasks' Refs, not their
	// entries: an operation's completion clears its Ref, so a staged
	// operation that completes is unreachable from here at once, and the
	// drain skips it without touching it.
	// It is kept in chunks of stageChunk, so that it grows without
	// copying. A task re-added while staged may be here twice.
	//
	// A drain lets go of the chunks rather than keep them for the next
	// batch: a kept chunk is cold by then, and every append to it waited
	// for a cache miss before the stripe's unlock, where a new one is warm
	// from its zeroing. In examples/purgatory_perf C, keeping them cost
	// 1.09x f93bfd4's CPU a request; letting go, 0.98x (same sitting).
	refs slots
	_    [128 - (unsafe.Sizeof(sync.Mutex{})+unsafe.Sizeof(slots{}))%128]byte
}

func (s *staging) init() {
	s.mark.InitMark()
	s.token.init()
	s.takenBy = math.MaxInt64
}

// stage holds the task whose Ref is r, and whose entry e is pending with
// its add-lock held and in no list, for the next drain, and arms the drain
// if none is queued. The caller holds the timer's read lock.
func (t *Timer) stage(r *Ref, e *Entry, now int64) {
	s := &t.staged
	e.Mark(&s.mark)
	st := &s.stripes[(uintptr(unsafe.Pointer(e))>>6)%stageStripes]
	st.mu.Lock()
	st.refs.push(r)
	st.mu.Unlock()
	if !s.armed.Load() && s.armed.CompareAndSwap(false, true) {
		s.token.expiration.Store(t.tickOf(now + int64(stageHold)))
		t.queue.offer(&s.token)
	}
}

// takeStaged takes every staged slice out, to be filed by this turn and
// the next ones (fileTaken), and notes the tick at which the first of
// them may be due. The caller holds the write lock: no Add of this timer
// runs, so nothing is staged meanwhile, and the next Add that stages arms
// a new drain.
func (t *Timer) takeStaged() {
	s := &t.staged
	s.armed.Store(false)
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		s.taken = append(s.taken, st.refs...)
		st.refs = nil
		st.mu.Unlock()
	}
	s.takenBy = min(s.takenBy, s.token.expiration.Load()+t.per.div(int64(stageHold)))
	t.setBacklogLen()
}

// fileTaken files up to max of the taken tasks, all of them with max < 0,
// and reports how many it looked at. The caller holds the write lock.
func (t *Timer) fileTaken(max int) int {
	s := &t.staged
	n := 0
	for len(s.taken) > 0 && (max < 0 || n < max) {
		c := s.taken[0]
		for ; s.takenAt < len(c) && (max < 0 || n < max); s.takenAt++ {
			// No entry: the operation completed, and cleared it.
			if e := c[s.takenAt].Entry(); e != nil {
				t.fileStaged(e)
			}
			n++
		}
		if s.takenAt < len(c) {
			break
		}
		s.taken[0] = nil
		s.taken, s.takenAt = s.taken[1:], 0
	}
	if len(s.taken) == 0 {
		s.taken, s.takenAt, s.takenBy = nil, 0, math.MaxInt64
	}
	t.setBacklogLen()
	return n
}

// fileStaged files a staged entry into the wheels, or fires it if it is
// due, unless it is no longer staged here.
func (t *Timer) fileStaged(e *Entry) {
	// No add-lock: cancelled since, or being added to another timer,
	// whose Add places it. Without the mark: moved, by a re-Add here (a
	// later slot holds it) or to a bucket.
	if !e.TryLockAdd() {
		return
	}
	h := t.hooks
	if h != nil && h.refile != nil {
		h.refile(e, false)
	}
	if e.Unmark(&t.staged.mark) {
		if t.wheel.add(e, t.tickOf(e.Expire)) {
			t.fire(e)
		} else if h != nil && h.refile != nil {
			h.refile(e, true)
		}
	}
	e.UnlockAdd()
}

// stagedCount counts the tasks staged here, each once. The caller holds
// the write lock.
func (t *Timer) stagedCount() int {
	s := &t.staged
	seen := map[*Entry]struct{}{}
	for _, c := range s.taken {
		for _, r := range c {
			if e := r.Entry(); e != nil && e.In(&s.mark) && e.IsPending() {
				seen[e] = struct{}{}
			}
		}
	}
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		st.each(func(e *Entry) {
			if e.In(&s.mark) && e.IsPending() {
				seen[e] = struct{}{}
			}
		})
		st.mu.Unlock()
	}
	return len(seen)
}

// dropStaged cancels every staged task, for Close. The caller holds the
// write lock.
func (t *Timer) dropStaged() {
	s := &t.staged
	for _, c := range s.taken {
		for _, r := range c {
			if e := r.Entry(); e != nil && e.In(&s.mark) {
				e.Cancel()
			}
		}
	}
	s.taken, s.takenAt, s.takenBy = nil, 0, math.MaxInt64
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		var held []*Entry
		st.each(func(e *Entry) { held = append(held, e) })
		st.refs = nil
		st.mu.Unlock()
		for _, e := range held {
			if e.In(&s.mark) {
				e.Cancel()
			}
		}
	}
	s.armed.Store(false)
}

// each calls f with the entry of every slot that still has one. The
// caller holds mu.
func (st *stageStripe) each(f func(*Entry)) {
	for _, c := range st.refs {
		for _, r := range c {
			if e := r.Entry(); e != nil {
				f(e)
			}
		}
	}
}

// slots is a list of chunks of stageChunk Refs: it grows without copying
// what it holds.
type slots [][]*Ref

func (s *slots) push(r *Ref) {
	if n := len(*s); n == 0 || len((*s)[n-1]) == stageChunk {
		*s = append(*s, make([]*Ref, 0, stageChunk))
	}
	last := &(*s)[len(*s)-1]
	*last = append(*last, r)
}
