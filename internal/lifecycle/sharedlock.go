package lifecycle

import (
	"sync"
)

// SharedLock is a lock several operations share (Kafka's lockOpt). A check
// that finds it held leaves the operation on a list, and whoever unlocks
// next checks the listed operations, so a callback running under the lock
// may trigger checks of the others that share it. A park that finds it
// held is left the same way (DeferPark), and whoever unlocks next finishes
// it. The zero value is unlocked.
type SharedLock struct {
	mu      sync.Mutex
	pmu     sync.Mutex // guards pending and parks
	pending []*Op
	parks   []func() // each runs holding mu (DeferPark)
}

// Lock locks l.
func (l *SharedLock) Lock() { l.mu.Lock() }

// TryLock tries to lock l and reports whether it did.
func (l *SharedLock) TryLock() bool { return l.mu.TryLock() }

// Unlock finishes every park that found l held, still holding it (parks
// those parks make included), unlocks l, and then checks every operation
// whose check found l held.
func (l *SharedLock) Unlock() {
	for {
		l.pmu.Lock()
		parks := l.parks
		l.parks = nil
		l.pmu.Unlock()
		if len(parks) == 0 {
			break
		}
		for _, park := range parks {
			park()
		}
	}
	l.mu.Unlock()
	for {
		l.pmu.Lock()
		ops := l.pending
		l.pending = nil
		parked := len(l.parks) > 0
		l.pmu.Unlock()
		// A park listed after the last look above was listed by a
		// goroutine that found l held, by this one: finish it. If another
		// goroutine holds l now, its Unlock will.
		if parked && l.mu.TryLock() {
			l.Unlock()
		}
		if len(ops) == 0 {
			return
		}
		for _, o := range ops {
			TryComplete(o)
		}
	}
}

func (l *SharedLock) deferCheck(o *Op) {
	l.pmu.Lock()
	l.pending = append(l.pending, o)
	l.pmu.Unlock()
}
