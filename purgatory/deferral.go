package purgatory

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/watchers"
	"github.com/purgatory-go/purgatory/timer"
)

// A deferral holds back the timeouts of newly parked operations whose
// timeout is long, and adds to the timer only those still pending a while
// later. Most operations with a long timeout complete early (a produce
// waits milliseconds for its replicas and has 30 s to do it): those
// complete without ever entering the timer, and their completion has no
// bucket entry to unlink. examples/purgatory_perf with -timeout 1000
// -pct50 50 -pct75 75 (docs/benchmarks.md, C) measures what it saves:
// 1.11x the rate against no deferral, in the same sitting.
//
// It is a stage in front of the purgatory's timer, driven by that timer:
// the first park into an empty deferral adds a task (tick) with a delay of
// deferHold, and when the timer runs it, it adds to the timer every held
// operation that is still pending. The hold is therefore measured on the
// timer's own clock, whichever it keeps: the system's, a MockTimer's, or a
// testing/synctest bubble's fake time. Each held operation's deadline was
// fixed at its park on that clock (tasklist.Entry.PresetDeadline), so the
// wait moves nothing: an operation expires exactly when it would have,
// even when the clock jumps past its deadline (a MockTimer's Advance: the
// tick runs, adds it, and it is due at once).
//
// Fixing the deadline needs the timer's clock, so a purgatory holds
// timeouts back only when its timer reports it (a Now method: SystemTimer,
// MockTimer). With any other Timer every timeout enters the timer at park.
//
// What waits is the operation's Handle, which its completion clears, so a
// completed operation is as unreachable from here as from the watch lists.
type deferral struct {
	timer   timer.Timer
	stripes [deferStripes]deferStripe
	// armed is set while a tick is in the timer, or about to be.
	armed atomic.Bool
	tick  deferTick
	// settle is the purgatory's settleAdd.
	settle func(o *lifecycle.Op, err error) bool
	// hooks are points where a test runs a competitor; nil otherwise.
	hooks *deferHooks
}

// deferHooks are the deferral's points between two steps.
type deferHooks struct {
	pushed   func() // in hold, after the push, before armed is read
	disarmed func() // in drain, after armed is cleared, before anything is taken
	drained  func() // in drain, after every stripe is taken and added
}

const (
	// deferHold is the tick's delay: an operation waits between nothing
	// and deferHold (plus the timer's lateness) before it enters the
	// timer.
	deferHold = 400 * time.Millisecond
	// deferMinTimeout is the shortest timeout held back: twice the hold,
	// so that the tick comes well before the deadline.
	deferMinTimeout = 2 * deferHold
	// deferStripes is how many locks parks spread over, by the
	// operation's address.
	deferStripes = 16
)

type deferStripe struct {
	mu   sync.Mutex
	held watchers.Chunks // guarded by mu
	_    [128 - 8 - 24]byte
}

// deferTick is the timer task that drains the deferral.
type deferTick struct {
	timer.TaskBase
	d *deferral
}

func (t *deferTick) Run() { t.d.drain() }

func newDeferral(t timer.Timer, settle func(*lifecycle.Op, error) bool) *deferral {
	d := &deferral{timer: t, settle: settle}
	d.tick.d = d
	d.tick.SetDelay(deferHold)
	return d
}

// hold queues h, whose operation's deadline is fixed already, for the
// next tick, and arms the tick if none is due.
func (d *deferral) hold(o *lifecycle.Op, h *lifecycle.Handle) {
	s := &d.stripes[(uintptr(unsafe.Pointer(o))>>7)%deferStripes]
	s.mu.Lock()
	s.held.Push(h)
	s.mu.Unlock()
	if d.hooks != nil && d.hooks.pushed != nil {
		d.hooks.pushed()
	}
	// Read after the push: a drain clears armed before it takes what is
	// held, so either it takes h or this park sees armed clear and arms.
	if !d.armed.Load() && d.armed.CompareAndSwap(false, true) {
		if d.timer.Add(&d.tick) != nil {
			// The timer is closed: Shutdown deals with what is pending.
			d.armed.Store(false)
		}
	}
}

// drain adds to the timer every held operation that is still pending. It
// runs as the tick, on the goroutine that runs the timer's tasks.
func (d *deferral) drain() {
	d.armed.Store(false)
	if d.hooks != nil && d.hooks.disarmed != nil {
		d.hooks.disarmed()
	}
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		held := s.held
		s.held = nil
		s.mu.Unlock()
		for _, c := range held {
			for _, h := range c {
				if o := h.Op(); o != nil {
					d.settle(o, d.timer.Add(lifecycle.Task(o)))
				}
			}
		}
	}
	if d.hooks != nil && d.hooks.drained != nil {
		d.hooks.drained()
	}
}

// clear drops what is held, for Shutdown once the timer is closed: the
// operations are still on the watch lists, where Shutdown finds them.
func (d *deferral) clear() {
	d.armed.Store(false) // the closed timer dropped the tick
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		s.held = nil
		s.mu.Unlock()
	}
}
