package timer

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/purgatory-go/purgatory/internal/tasklink"
)

// Task is work that runs once its delay has elapsed.
//
// A Task is implemented by embedding [TaskBase] in a struct and adding a Run
// method; the unexported method that TaskBase supplies seals the interface, so
// that every task carries the bookkeeping the timer needs and no Add has to
// allocate.
//
// Run is called from the timer's executor goroutine (or, for [MockTimer], from
// the goroutine that advances the clock). It should not block: with the default
// single executor, a Run that blocks holds up every other expired task.
type Task interface {
	Run()
	base() *TaskBase
}

// Task states, kept in the low bits of TaskBase.word.
const (
	stateIdle      uint32 = 0 // never added, or already fired
	statePending   uint32 = 1 // in a bucket, or between buckets during a flush
	stateCancelled uint32 = 2 // Cancel was called and no Add came after it
	stateMask      uint32 = 3

	// addLock is the licence to link the entry into a bucket: an Add holds
	// it for the whole of its unlink and link, and the reaper while it
	// refiles the entry one level down. So no two goroutines link one entry
	// at once, even when it moves between two timers, and the link itself
	// needs no atomic swap. It lives in the same word as the state so that
	// a cancel or a firing can change the state while it is held, and the
	// holder sees that change when it lets go.
	addLock uint32 = 4
)

// TaskBase holds a task's delay and its link into the timer. Embed it in the
// struct that implements [Task]. Its zero value is a task with no delay that
// has never been added. A TaskBase must not be copied after its first Add.
//
// TaskBase is 64 bytes, so a task that embeds it and adds nothing of its own
// costs one 64-byte allocation and nothing more while it is pending.
type TaskBase struct {
	// word holds the state (stateMask) and addLock. Every change is a
	// compare-and-swap, so Cancel and the flush that fires a task need no lock.
	word atomic.Uint32

	// flags is not written by the timer: it fills what would be padding,
	// and the operation lifecycle keeps its state there (internal/tasklink).
	// Add reads one bit of it, tasklink.OwnDeadline.
	flags atomic.Uint32

	// list is the bucket the entry is linked into, or nil. It is written only
	// by a goroutine that holds that bucket's mu (to link or unlink it), set
	// only by one that also holds addLock, and read without a lock to find
	// which bucket to lock (see listRef).
	list listRef

	// next and prev link the entry into list. They are guarded by list.mu.
	next, prev *TaskBase

	// expire is when the task is due, in nanoseconds on the timer's clock
	// (tasklink.Deadline). Add writes it, holding addLock and the timer's
	// read lock, and Add and the flush (which holds the timer's write lock)
	// read it. A delayed operation's may have been written instead when it
	// was parked (tasklink.OwnDeadline), and is then read by its
	// completion too.
	expire int64

	// delay is the task's delay. SetDelay must not race with Add.
	delay time.Duration

	// owner is what the entry belongs to. For a Task that embeds this
	// TaskBase it is that Task, recorded by its first Add, and an expiry
	// calls its Run. A delayed operation records the user's operation here
	// before its first Add, and its expiry goes to tasklink.Run instead, so
	// that no method of the user's type stands in for the timer's (see run).
	// Written only while nil, so once set it is only ever read.
	owner any
}

func (b *TaskBase) base() *TaskBase { return b }

// run runs the expired entry: the Task that embeds it, or else the
// lifecycle's expiry. The owner is the embedding Task only when its own
// TaskBase is b; an operation type that happens to have a Run method of its
// own never gets here as a Task, so that method cannot shadow expiry.
func (b *TaskBase) run() {
	if t, ok := b.owner.(Task); ok && t.base() == b {
		t.Run()
		return
	}
	tasklink.Run(unsafe.Pointer(b))
}

// task returns the Task that embeds b, or nil for a delayed operation's
// entry. It is for panic reports.
func (b *TaskBase) task() Task {
	if t, ok := b.owner.(Task); ok && t.base() == b {
		return t
	}
	return nil
}

// Delay reports the delay the next Add will use.
func (b *TaskBase) Delay() time.Duration { return b.delay }

// SetDelay sets the delay the next Add will use. A delay of zero or less means
// the task is due at once. SetDelay must not be called while an Add of the same
// task is in progress; it does not move a task that is already pending (add it
// again to do that).
func (b *TaskBase) SetDelay(d time.Duration) { b.delay = d }

// Cancel stops the task from running. It reports whether this call prevented
// a pending run: false if the task was never added, has already been handed to
// the executor, or was cancelled before. Like [time.Timer.Stop], it does not
// wait for a Run that has already started. Cancel is O(1) and safe to call
// from any goroutine, including from Run itself.
func (b *TaskBase) Cancel() bool {
	for {
		w := b.word.Load()
		st := w & stateMask
		if st == stateCancelled {
			return false
		}
		if b.word.CompareAndSwap(w, w&^stateMask|stateCancelled) {
			if st != statePending {
				return false
			}
			b.unlink()
			return true
		}
	}
}

// IsCancelled reports whether Cancel was called and the task was not added
// again afterwards.
func (b *TaskBase) IsCancelled() bool {
	return b.word.Load()&stateMask == stateCancelled
}

// isPending reports whether the task waits in a timer.
func (b *TaskBase) isPending() bool {
	return b.word.Load()&stateMask == statePending
}

// fire moves a pending task to idle. Exactly one caller wins; that caller
// runs the task.
func (b *TaskBase) fire() bool {
	for {
		w := b.word.Load()
		if w&stateMask != statePending {
			return false
		}
		if b.word.CompareAndSwap(w, w&^stateMask|stateIdle) {
			return true
		}
	}
}

// lockAdd takes addLock and marks the task pending in one step.
func (b *TaskBase) lockAdd() {
	for spins := 0; ; spins++ {
		w := b.word.Load()
		if w&addLock == 0 && b.word.CompareAndSwap(w, w&^stateMask|statePending|addLock) {
			return
		}
		// Another goroutine is adding the same task, or a reaper refiling
		// it: a short wait.
		if spins > 8 {
			runtime.Gosched()
		}
	}
}

// tryLockAdd takes addLock without changing the state, if the task is
// pending and nobody holds it. The reaper uses it to refile an entry it
// took out of a bucket: false means the entry was cancelled meanwhile, or
// that an Add of it to another timer holds the lock and will place it.
func (b *TaskBase) tryLockAdd() bool {
	for {
		w := b.word.Load()
		if w&addLock != 0 || w&stateMask != statePending {
			return false
		}
		if b.word.CompareAndSwap(w, w|addLock) {
			return true
		}
	}
}

// unlockAdd releases addLock. If the task stopped being pending while the
// lock was held (a Cancel, or a firing), it makes sure the entry is unlinked:
// the Cancel may have looked for the entry before it was linked.
func (b *TaskBase) unlockAdd() {
	if old := b.word.And(^addLock); old&stateMask != statePending {
		b.unlink()
	}
}

// unlink removes the entry from whatever bucket holds it. The bucket can
// change under us (a flush, or a move by the holder of addLock), so look
// again until it is nil. Once it is nil, only a holder of addLock can link
// the entry again.
func (b *TaskBase) unlink() {
	for {
		l := b.list.Load()
		if l == nil {
			return
		}
		l.remove(b)
	}
}
