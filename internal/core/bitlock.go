package core

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// A bit lock is a lock kept in two bits of a word that holds other state
// as well: lock, set by its holder, and waiters, set by a goroutine that
// found it held and sleeps until the holder lets go. It costs no memory of
// its own, which is why a timer entry's add-lock and an operation's own
// lock are bit locks (their comments give what that buys, measured).
//
// Its holder takes it with a compare-and-swap of its own (which may change
// other bits at once), and on failure calls WaitBit, then tries again. It
// lets go by clearing lock and waiters in one step and, if waiters was
// set, calling WakeBit. Sleepers wait on one of a fixed table of condition
// variables, chosen by the word's address, which the first WaitBit of the
// process allocates.

const parkStripes = 256

type parkStripe struct {
	mu   sync.Mutex
	cond sync.Cond
}

var (
	parkOnce  sync.Once
	parkTable *[parkStripes]parkStripe
)

func parkStripeOf(w *atomic.Uint32) *parkStripe {
	parkOnce.Do(func() {
		t := new([parkStripes]parkStripe)
		for i := range t {
			t[i].cond.L = &t[i].mu
		}
		parkTable = t
	})
	return &parkTable[(uintptr(unsafe.Pointer(w))>>6)%parkStripes]
}

// WaitBit returns once lock is clear in w, asleep meanwhile. It sets
// waiters in w, which asks the holder to call WakeBit when it lets go.
func WaitBit(w *atomic.Uint32, lock, waiters uint32) {
	p := parkStripeOf(w)
	p.mu.Lock()
	for {
		s := w.Load()
		if s&lock == 0 {
			break
		}
		// The holder clears both bits and then takes p.mu to wake us,
		// so it cannot wake us between our setting waiters and our
		// sleeping: we hold p.mu until Wait.
		if s&waiters == 0 && !w.CompareAndSwap(s, s|waiters) {
			continue
		}
		p.cond.Wait()
	}
	p.mu.Unlock()
}

// WakeBit wakes every goroutine asleep in WaitBit on w. The holder calls
// it after clearing lock and waiters, if waiters was set.
func WakeBit(w *atomic.Uint32) {
	p := parkStripeOf(w)
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
}
