package timer

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/purgatory-go/purgatory/internal/tasklist"
)

// Staging holds back the tasks whose deadline is far off. An Add whose
// deadline is at least stageMin away does not file the task into a
// bucket: it marks it (tasklist.Entry.Mark) and appends it to a staging
// slice. Every stageHold the goroutine advancing the timer files the tasks
// still pending into the wheels, at the deadlines their Adds fixed.
//
// Most far deadlines never come: a produce waits milliseconds for its
// replicas and has 30 s to do it, a fetch waits for bytes. Such a task is
// cancelled while staged, and its Cancel is one compare-and-swap of its
// list pointer (the mark), where a Cancel of a task in a bucket takes the
// bucket stripe's lock and writes its neighbours' links: with 1 s
// timeouts every task added within a level-2 bucket's span shares that
// bucket, and the Adds and Cancels of two cores contend for its four
// stripes. examples/purgatory_perf with -timeout 1000 -pct50 50 -pct75 75
// (docs/benchmarks.md, C) measures what it saves.
//
// Staged tasks are the timer's own pending tasks: Size counts them, an
// Advance that passes their deadlines runs them, and nothing else is put
// in the timer for them. The wait moves no deadline: a task staged late in
// a drain is filed due, and fires in the same turn.
type staging struct {
	mark    tasklist.List // what staged entries point to
	stripes [stageStripes]stageStripe
	// armed is set while the token is queued, or about to be: an Add that
	// stages into an unarmed staging queues it.
	armed atomic.Bool
	// token is a bucket of no entries that stands for the staging area in
	// the delay queue: when it is due, a turn drains the staging slices.
	token bucket
}

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
	// stageChunk is how many tasks a chunk of a stripe holds (4 KiB).
	stageChunk = 256
)

type stageStripe struct {
	mu sync.Mutex
	// tasks is guarded by mu. It holds the Task given to Add, not the
	// entry: an operation's Task is a handle that its completion clears,
	// so that a staged operation that completes is unreachable from here
	// at once.
	// It is kept in chunks of stageChunk, so that it grows without
	// copying. A task re-added while staged may be here twice.
	//
	// A drain lets go of the chunks rather than keep them for the next
	// batch: a kept chunk is cold by then, and every append to it waited
	// for a cache miss before the stripe's unlock, where a new one is warm
	// from its zeroing. In examples/purgatory_perf C, keeping them cost
	// 1.09x f93bfd4's CPU a request; letting go, 0.98x (same sitting).
	tasks [][]Task
	_     [128 - (unsafe.Sizeof(sync.Mutex{})+unsafe.Sizeof([][]Task(nil)))%128]byte
}

func (s *staging) init() {
	s.mark.InitMark()
	s.token.init()
}

// stage holds task, whose entry e is pending with its add-lock held and in
// no list, for the next drain, and arms the drain if none is queued. The
// caller holds the timer's read lock.
func (t *SystemTimer) stage(task Task, e *tasklist.Entry, now int64) {
	s := &t.staged
	e.Mark(&s.mark)
	st := &s.stripes[(uintptr(unsafe.Pointer(e))>>6)%stageStripes]
	st.mu.Lock()
	if n := len(st.tasks); n == 0 || len(st.tasks[n-1]) == stageChunk {
		st.tasks = append(st.tasks, make([]Task, 0, stageChunk))
	}
	last := &st.tasks[len(st.tasks)-1]
	*last = append(*last, task)
	st.mu.Unlock()
	if !s.armed.Load() && s.armed.CompareAndSwap(false, true) {
		s.token.expiration.Store(t.tickOf(now + int64(stageHold)))
		t.queue.offer(&s.token)
	}
}

// drainStaged files every staged task that is still pending and still
// staged here into the wheels, or fires it if it is due. The caller holds
// the write lock: no Add of this timer runs, so nothing is staged
// meanwhile, and the next Add that stages arms a new drain.
func (t *SystemTimer) drainStaged() {
	s := &t.staged
	s.armed.Store(false)
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		held := st.tasks
		st.tasks = nil
		st.mu.Unlock()
		for _, c := range held {
			for _, task := range c {
				t.fileStaged(task)
			}
		}
	}
}

// fileStaged files a staged task into the wheels, or fires it if it is
// due, unless it is no longer staged here.
func (t *SystemTimer) fileStaged(task Task) {
	// No entry: an operation's handle, cleared by its completion. No
	// add-lock: cancelled since, or being added to another timer, whose
	// Add places it. Without the mark: moved, by a re-Add here (a later
	// slot holds it) or to a bucket.
	e := tasklist.Of(task)
	if e == nil || !e.TryLockAdd() {
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

// stagedCount counts the tasks staged here, each once.
func (t *SystemTimer) stagedCount() int {
	s := &t.staged
	seen := map[*tasklist.Entry]struct{}{}
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		for _, c := range st.tasks {
			for _, task := range c {
				if e := tasklist.Of(task); e != nil && e.In(&s.mark) && e.IsPending() {
					seen[e] = struct{}{}
				}
			}
		}
		st.mu.Unlock()
	}
	return len(seen)
}

// dropStaged cancels every staged task, for Close.
func (t *SystemTimer) dropStaged() {
	s := &t.staged
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		held := st.tasks
		st.tasks = nil
		st.mu.Unlock()
		for _, c := range held {
			for _, task := range c {
				if e := tasklist.Of(task); e != nil && e.In(&s.mark) {
					e.Cancel()
				}
			}
		}
	}
	s.armed.Store(false)
}
