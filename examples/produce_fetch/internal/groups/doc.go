// Package groups is the example broker's group coordinator: Kafka's
// classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup, and the offsets a group commits), ported from Kafka's
// GroupCoordinator.scala, as a state machine per group:
//
//	Empty -> PreparingRebalance -> CompletingRebalance -> Stable
//
// with Dead at the end for every group once the broker shuts down.
//
// The coordinator waits for three things, and Kafka parks each wait as a
// delayed operation in a purgatory of its own. This package does not park
// them itself: it asks a [Waits] to, and the broker (package main,
// delayed_group.go) implements Waits with DelayedJoin, DelayedSync and
// DelayedHeartbeat in three purgatories. The waits call back into the
// coordinator when they complete ([Coordinator.CompleteJoin],
// [Coordinator.SyncExpired], [Coordinator.SessionExpired]) and ask the
// group what they need to decide whether to complete ([Group.AllJoined],
// [Group.AwaitingSync], [Group.HasSession]).
//
// # Locking
//
// One operation.SharedLock per group ([Group.SharedLock]) guards the
// group's state and is the lock of all its waits (Kafka's group.lock,
// passed as their lockOpt), so a wait's callbacks always run with the
// group locked, and a request handler that holds the lock may check or
// park the group's waits: a park finishes just before the lock is
// released, a check just after. Every method of [Group], and every method
// of [Coordinator] that takes a *Group, is called with that lock held.
//
// Reply functions (a JoinGroup's, a SyncGroup's) are called exactly once
// per request, often from a wait's callback under the group's lock: they
// must not block, and every path that forgets a waiting request must
// answer it first, or the client's connection would wait for that answer
// forever.
package groups
