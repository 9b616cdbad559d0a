package operation

import "github.com/purgatory-go/purgatory/internal/lifecycle"

// SharedLock is a lock that several operations share (Kafka's lockOpt, used
// where one group's join, sync and heartbeat operations must not
// interleave). Pass it to WithLock.
//
// Kafka's shared locks are re-entrant; Go's mutexes are not. SharedLock
// bridges the gap: a check that finds the lock held does not wait for it,
// it leaves the operation on a list, and whoever unlocks next checks the
// listed operations. So a callback running under the lock may call
// CheckAndComplete for another operation that shares it: the check happens
// as soon as the lock is released.
//
// Parks are handled much the same way. TryCompleteElseWatch of an
// operation whose SharedLock is held, by a callback running under it or by
// code that locked it, makes its refusals (ErrAlreadyWatched, ErrFull,
// purgatory.ErrShutdown, bad keys) at once, returns false, and leaves the
// rest of the park to whoever unlocks next, which finishes it (the first
// TryComplete, the timeout's Add, the watches, the last TryComplete)
// before the lock is released, as a park made at that moment would. So
// the park is over by the time anyone else can take the lock, as with
// Kafka's re-entrant lock; until the unlock the operation is not yet
// counted in NumDelayed and no check finds it, and its timeout runs from
// the unlock. Kafka's group coordinator parks a member's next
// heartbeat from the completion of its join this way.
//
// The zero SharedLock is unlocked and ready to use. It must not be copied
// after first use.
type SharedLock struct{ l lifecycle.SharedLock }

// Lock locks l.
func (l *SharedLock) Lock() { l.l.Lock() }

// TryLock tries to lock l and reports whether it did.
func (l *SharedLock) TryLock() bool { return l.l.TryLock() }

// Unlock unlocks l, then checks every operation whose check found l held.
func (l *SharedLock) Unlock() { l.l.Unlock() }
