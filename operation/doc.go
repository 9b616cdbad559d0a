// Package operation defines DelayedOperation, a request that waits in a
// purgatory until it can complete or its timeout passes, and Base, which
// gives an operation Kafka's semantics when embedded.
//
// # Writing an operation
//
//	type delayedProduce struct {
//		operation.Base
//		required int64
//		replicas *ReplicaState
//		respond  func(err error)
//	}
//
//	func newDelayedProduce(...) *delayedProduce {
//		p := &delayedProduce{...}
//		p.Init(p, timeout) // once, before the operation is used
//		return p
//	}
//
//	// TryComplete is called under the operation's lock.
//	func (p *delayedProduce) TryComplete() bool {
//		if p.replicas.HighWatermark() >= p.required {
//			return p.ForceComplete()
//		}
//		return false
//	}
//
//	// OnComplete runs once; Cause is nil unless a timeout, a context or a
//	// shutdown completed the operation.
//	func (p *delayedProduce) OnComplete()   { p.respond(p.Cause()) }
//	func (p *delayedProduce) OnExpiration() { metrics.ProduceExpired.Inc() }
//
// # Callback order
//
//  1. TryComplete runs with the operation's lock held, any number of times,
//     until the operation completes; it must return ForceComplete() when it
//     can finish, and false otherwise.
//  2. ForceComplete lets exactly one caller win (a compare-and-swap). The
//     winner cancels the timeout, takes the operation off every watch list,
//     and calls OnComplete. Losers return false at once, without waiting
//     for OnComplete to finish: unlike sync.Once, ForceComplete is not a
//     barrier.
//  3. OnComplete runs exactly once per operation, whoever completed it.
//  4. OnExpiration runs after OnComplete, only when the timeout (or the
//     purgatory's Shutdown) won the race. Expiry takes the operation's
//     lock, so TryComplete, OnComplete and OnExpiration of one operation
//     never overlap when they are reached through the purgatory. (A
//     ForceComplete called by user code without the lock is exactly-once,
//     but is not serialised with a TryComplete running on another
//     goroutine.)
//  5. Cause tells OnComplete why it runs: nil for an early completion,
//     ErrExpired, purgatory.ErrShutdown, or the cause of the context given
//     to WithContext.
//
// ForceComplete of an operation whose Init was never called panics: there
// is no OnComplete to run.
//
// Only these methods of an operation are consulted: a method of its own
// named Run, say, does not affect its timeout, whose timer entry is internal
// to the library.
//
// When the operation is parked in a purgatory, a panic in any of the three
// callbacks is recovered, counted in the purgatory's Stats and logged; the
// operation stays completed (or, for TryComplete, stays pending until its
// timeout). One bad callback must not stop the reaper or a goroutine that
// was completing other operations.
//
// # Locks
//
// Each operation has its own mutex unless Init is given WithLock. Operations
// that must not interleave can share a *SharedLock (Kafka's lockOpt).
// Go's mutexes are not re-entrant, so checks never wait for a lock that is
// held: they leave a note for the holder, who runs the check when it
// unlocks. Do not call CheckAndComplete while holding
// a lock that a TryComplete takes, other than a SharedLock.
package operation
