package timer

import (
	"github.com/purgatory-go/purgatory/internal/core"
	"sync"
	"time"
)

// Reaper drives a Timer: a goroutine calls AdvanceClock in a loop, waiting up
// to [reaperPoll] each time, so that expired tasks run without anyone else
// calling AdvanceClock. It is Kafka's SystemTimerReaper.
//
// A Reaper is itself a Timer: Add, Now, Size and AdvanceClock go to the wrapped
// timer. Close stops the goroutine (waking it at once when the timer is one of
// this package's), waits for it, then closes the wrapped timer.
type Reaper struct {
	engine    // t's, if t is a timer of this package
	name      string
	t         Timer
	done      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	err       error
	// at, if not nil, is called at each step of the loop and of Close: a
	// hook of this package's tests, given to newReaper.
	at func(reaperStep)
}

// reaperStep names the points of a Reaper's loop and of its Close where a
// test's hook runs.
type reaperStep int

const (
	stepTop      reaperStep = iota // the loop, before its check of done
	stepChecked                    // the loop, after the check, before AdvanceClock
	stepAdvanced                   // the loop, after AdvanceClock returned
	stepWoken                      // Close, once it has closed done and woken the timer
)

var _ Timer = (*Reaper)(nil)

// NewReaper starts a goroutine that advances t, and returns the Reaper that
// owns it. It panics if t is nil, as that is a programming error.
func NewReaper(name string, t Timer) *Reaper { return newReaper(name, t, nil) }

func newReaper(name string, t Timer, at func(reaperStep)) *Reaper {
	if t == nil {
		panic("timer: NewReaper called with a nil Timer")
	}
	r := &Reaper{
		name:    name,
		t:       t,
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
		at:      at,
	}
	r.engine = core.LinkOf(r, t)
	go r.loop()
	return r
}

// loop advances the timer until Close. Close closes done and then wakes
// the timer, which cuts short the wait in progress and keeps every later
// one from sleeping (on this package's timers: a closed channel their
// wait selects on), so Close is seen wherever the loop is: before its
// check of done, between the check and the wait, or inside the wait.
func (r *Reaper) loop() {
	defer close(r.stopped)
	for {
		r.step(stepTop)
		select {
		case <-r.done:
			return
		default:
		}
		r.step(stepChecked)
		r.t.AdvanceClock(reaperPoll)
		r.step(stepAdvanced)
	}
}

func (r *Reaper) step(s reaperStep) {
	if r.at != nil {
		r.at(s)
	}
}

// Add implements [Timer].
func (r *Reaper) Add(task Task) error { return r.t.Add(task) }

// AdvanceClock implements [Timer]; the Reaper's goroutine already calls it,
// so other callers rarely need to.
func (r *Reaper) AdvanceClock(timeout time.Duration) bool { return r.t.AdvanceClock(timeout) }

// Size implements [Timer].
func (r *Reaper) Size() int { return r.t.Size() }

// Now implements [Timer]: the wrapped timer's clock.
func (r *Reaper) Now() time.Duration { return r.t.Now() }

// Close implements [Timer]. It is idempotent and returns the wrapped timer's
// Close error.
func (r *Reaper) Close() error {
	r.closeOnce.Do(func() {
		close(r.done)
		if w, ok := r.t.(waker); ok {
			w.wake()
		}
		r.step(stepWoken)
		<-r.stopped
		r.err = r.t.Close()
	})
	return r.err
}

func (r *Reaper) wake() {
	if w, ok := r.t.(waker); ok {
		w.wake()
	}
}
