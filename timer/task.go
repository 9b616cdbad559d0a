package timer

import (
	"time"

	"github.com/purgatory-go/purgatory/internal/core"
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
	core.Sealed
}

// TaskBase holds a task's delay and its link into the timer. Embed it in the
// struct that implements [Task]. Its zero value is a task with no delay that
// has never been added. A TaskBase must not be copied after its first Add.
type TaskBase struct {
	link
}

// link names the embedded holder so that the field is unexported: only its
// sealing method is promoted.
type link = core.Base

func (b *TaskBase) entry() *core.Entry { return core.EntryOf(&b.link) }

// Delay reports the delay the next Add will use.
func (b *TaskBase) Delay() time.Duration { return b.entry().LoadDelay() }

// SetDelay sets the delay the next Add will use. A delay of zero or less means
// the task is due at once. SetDelay must not be called while an Add of the same
// task is in progress; it does not move a task that is already pending: the
// next Add does.
//
// To reset a task to a new delay, as [time.Timer.Reset] does a timer, Cancel
// it first and keep what Cancel reports, then set the delay and Add it:
//
//	stopped := task.Cancel() // true: the old deadline's Run will not come
//	task.SetDelay(d)
//	err := tm.Add(task)
//
// Cancel reports false when the task was not pending: it has run, or it was
// never added, or it has been taken to run, and its Run may be under way or
// still to come (on the executor), beside the one the new deadline brings.
// An Add alone moves a pending task too, but cannot tell which happened. As
// with a timer made by [time.AfterFunc], a Run that must not act for an old
// deadline has to be told by the code that reset it (a generation number, or
// a deadline, that both read under a lock of their own).
func (b *TaskBase) SetDelay(d time.Duration) { b.entry().Delay = int64(d) }

// Cancel stops the task from running. It reports whether this call prevented
// a pending run: false if the task was never added, has already been handed to
// the executor, or was cancelled before. Like [time.Timer.Stop], it does not
// wait for a Run that has already started. Cancel is O(1) and safe to call
// from any goroutine, including from Run itself.
func (b *TaskBase) Cancel() bool { return b.entry().Cancel() }

// IsCancelled reports whether Cancel was called and the task was not added
// again afterwards.
func (b *TaskBase) IsCancelled() bool { return b.entry().IsCancelled() }
