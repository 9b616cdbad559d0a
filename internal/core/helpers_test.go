package core

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"
)

// taskBase is a test task's holder, as package timer's TaskBase is.
type taskBase struct{ Base }

func (b *taskBase) entry() *Entry            { return EntryOf(&b.Base) }
func (b *taskBase) Delay() time.Duration     { return b.entry().LoadDelay() }
func (b *taskBase) SetDelay(d time.Duration) { b.entry().Delay = int64(d) }
func (b *taskBase) Cancel() bool             { return b.entry().Cancel() }
func (b *taskBase) IsCancelled() bool        { return b.entry().IsCancelled() }

// option sets a field of a test timer's Config.
type option func(*Config)

func withWheelSize(n int) option      { return func(c *Config) { c.WheelSize = n } }
func withTick(d time.Duration) option { return func(c *Config) { c.Tick = d } }
func withClock(clk Clock) option      { return func(c *Config) { c.Clock = clk } }

// inlineExecution runs expired tasks on the goroutine advancing the timer.
func inlineExecution() option { return func(c *Config) { c.Executors = 0 } }

// newTimer returns a timer with package timer's defaults (1 ms tick,
// wheels of 20, one executor, the system clock) but for opts.
func newTimer(name string, opts ...option) *Timer {
	c := Config{Name: name, Tick: time.Millisecond, WheelSize: 20, Executors: 1}
	for _, o := range opts {
		o(&c)
	}
	return New(c)
}

// reap advances st on a goroutine of its own, as a Reaper does, until the
// test ends; then it closes st.
func reap(t testing.TB, st *Timer) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			st.AdvanceClock(200 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		close(stop)
		st.Wake()
		<-done
		st.Close()
	})
}

// What the tests of the core look at, and production code does not.

// addLockBit is the add-lock's bit of Entry.State, for tests that play an
// Add holding it.
const addLockBit = addLock

// TryLock locks l if it is free.
func (l *list) TryLock() bool { return l.mu.TryLock() }

// Walk counts the linked entries by following the links, and calls f, if
// not nil, with each. It reports an error if a link does
// not point back, an entry names another list, or the count is off.
func (l *list) Walk(f func(*Entry)) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for e := l.root.next; e != &l.root; e = e.next {
		if int64(n) >= l.count {
			return n, fmt.Errorf("core: a list longer than its count %d", l.count)
		}
		if e.next.prev != e {
			return n, errors.New("core: a broken link")
		}
		if e.list.Load() != l {
			return n, errors.New("core: an entry that names another list")
		}
		if f != nil {
			f(e)
		}
		n++
	}
	if int64(n) != l.count || l.root.prev.next != &l.root {
		return n, fmt.Errorf("core: %d entries linked, count %d", n, l.count)
	}
	return n, nil
}

// hotEnd is where, from a List's start, what a link or an unlink writes
// ends: the lock, the count and the sentinel's links.
func hotEnd() uintptr {
	var l List
	return unsafe.Offsetof(l.root) + unsafe.Offsetof(l.root.prev) + unsafe.Sizeof(l.root.prev)
}

// len counts the linked entries by walking the lists.
func (b *bucket) len() int {
	n := 0
	for i := range b.stripes {
		m, _ := b.stripes[i].Walk(nil)
		n += m
	}
	return n
}
