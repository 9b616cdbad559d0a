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
}

var _ Timer = (*Reaper)(nil)

// NewReaper starts a goroutine that advances t, and returns the Reaper that
// owns it. It panics if t is nil, as that is a programming error.
func NewReaper(name string, t Timer) *Reaper {
	if t == nil {
		panic("timer: NewReaper called with a nil Timer")
	}
	r := &Reaper{
		name:    name,
		t:       t,
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	r.engine = core.LinkOf(r, t)
	go r.loop()
	return r
}

func (r *Reaper) loop() {
	defer close(r.stopped)
	for {
		select {
		case <-r.done:
			return
		default:
		}
		r.t.AdvanceClock(reaperPoll)
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
