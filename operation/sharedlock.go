package operation

import "sync"

// SharedLock is a lock that several operations share (Kafka's lockOpt, used
// where one group's join, sync and heartbeat operations must not interleave).
// Pass it to WithLock.
//
// Kafka's shared locks are re-entrant; Go's mutexes are not. SharedLock
// bridges the gap: a check that finds the lock held does not wait for it,
// it leaves the operation on a list, and whoever unlocks next checks the
// listed operations. So a callback running under the lock may call
// CheckAndComplete for another operation that shares it: the check happens
// as soon as the lock is released.
//
// The zero SharedLock is unlocked and ready to use. It must not be copied
// after first use.
type SharedLock struct {
	mu      sync.Mutex
	pmu     sync.Mutex // guards pending
	pending []*Base
}

// Lock locks l.
func (l *SharedLock) Lock() { l.mu.Lock() }

// TryLock tries to lock l and reports whether it did.
func (l *SharedLock) TryLock() bool { return l.mu.TryLock() }

// Unlock unlocks l, then checks every operation whose check found l held.
func (l *SharedLock) Unlock() {
	l.mu.Unlock()
	for {
		l.pmu.Lock()
		ops := l.pending
		l.pending = nil
		l.pmu.Unlock()
		if len(ops) == 0 {
			return
		}
		for _, b := range ops {
			b.SafeTryComplete()
		}
	}
}

// defer records b for the next Unlock.
func (l *SharedLock) deferCheck(b *Base) {
	l.pmu.Lock()
	l.pending = append(l.pending, b)
	l.pmu.Unlock()
}
