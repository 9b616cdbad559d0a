package operation

import (
	"runtime"
	"sync"
	"unsafe"
)

// An operation's own lock is two bits of its state word rather than a
// sync.Mutex: that keeps Base at 80 bytes with room for its Tracker and
// Handle pointers. An operation's lock is rarely contended (only by two
// checks of the same operation at once), so the slow path can afford to be
// plain: a short spin, then a wait on one of a fixed set of condition
// variables, chosen by the operation's address.
const (
	stLocked  uint32 = 1 << 5
	stWaiters uint32 = 1 << 6
)

const parkStripes = 256

var parking [parkStripes]struct {
	mu   sync.Mutex
	cond sync.Cond
	_    [40]byte
}

func init() {
	for i := range parking {
		parking[i].cond.L = &parking[i].mu
	}
}

func (b *Base) stripe() int { return int(uintptr(unsafe.Pointer(b))>>6) % parkStripes }

// opLock is a Base seen as a sync.Locker for its own lock. Converting a
// *Base to it allocates nothing.
type opLock Base

func (l *opLock) base() *Base { return (*Base)(l) }

// TryLock locks the operation's own lock if it is free.
func (l *opLock) TryLock() bool {
	f := l.base().flags()
	for {
		s := f.Load()
		if s&stLocked != 0 {
			return false
		}
		if f.CompareAndSwap(s, s|stLocked) {
			return true
		}
	}
}

// Lock locks the operation's own lock.
func (l *opLock) Lock() {
	if l.TryLock() {
		return
	}
	for range 30 {
		runtime.Gosched()
		if l.TryLock() {
			return
		}
	}
	b := l.base()
	f := b.flags()
	p := &parking[b.stripe()]
	p.mu.Lock()
	for {
		s := f.Load()
		if s&stLocked == 0 {
			if f.CompareAndSwap(s, s|stLocked) {
				p.mu.Unlock()
				return
			}
			continue
		}
		// Ask the holder to wake us. The holder clears the bit and then
		// takes p.mu to broadcast, so it cannot broadcast between our
		// setting the bit and our waiting: we hold p.mu until Wait.
		if s&stWaiters == 0 && !f.CompareAndSwap(s, s|stWaiters) {
			continue
		}
		p.cond.Wait()
	}
}

// Unlock unlocks the operation's own lock and wakes any waiters.
func (l *opLock) Unlock() {
	b := l.base()
	old := b.flags().And(^(stLocked | stWaiters))
	if old&stLocked == 0 {
		panic("operation: unlock of unlocked operation lock")
	}
	if old&stWaiters != 0 {
		p := &parking[b.stripe()]
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}
