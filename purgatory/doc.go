// Package purgatory holds delayed operations until they can complete or
// their timeouts pass. It is a port of Apache Kafka's
// DelayedOperationPurgatory: a broker parks a produce waiting for replicas,
// or a fetch waiting for bytes, watched by keys such as its partitions;
// when something happens to a key it calls CheckAndComplete(key), and every
// operation on that key that can now finish completes early. Operations that
// never can are expired by a timer of hierarchical timing wheels (package
// timer), which a reaper goroutine advances.
//
// # Usage
//
//	p, err := purgatory.New[operation.TopicPartitionKey, *DelayedFetch]("Fetch")
//	defer p.Shutdown(ctx)
//
//	// On a request that cannot be answered yet:
//	f := NewDelayedFetch(req, maxWait) // embeds operation.Base, calls Init
//	if done, err := p.TryCompleteElseWatch(f, keysOf(req)...); err != nil { ... }
//
//	// When the leader appends to a partition:
//	p.CheckAndComplete(operation.TopicPartitionKey{Topic: t, Partition: n})
//
// # Exactly once
//
// OnComplete runs exactly once per operation, whoever completes it:
// TryCompleteElseWatch, CheckAndComplete on any of its keys, ForceComplete
// from user code, expiry, or Shutdown. OnExpiration runs only when expiry
// (or Shutdown) won. Completion is a compare-and-swap in operation.Base.
//
// # The story about the lock
//
// TryCompleteElseWatch holds the operation's lock from its first
// TryComplete, across watching every key, to a last TryComplete. Without
// that, this interleaving loses a wake-up: goroutine A calls TryComplete,
// which fails; goroutine B makes the operation completable and calls
// CheckAndComplete, which finds nothing watched yet; A then watches the
// keys, and the operation waits for its timeout although it could have
// completed. With the lock, B's check either runs before A's watch (and
// A's last TryComplete sees B's change) or after it (and B finds the
// operation and checks it).
//
// Kafka's story goes on: because Kafka's locks are re-entrant, a callback can
// check an operation whose lock its own thread holds. Go's mutexes are not
// re-entrant, so a check here never waits for an operation's lock: if the
// lock is held, it leaves a note, and the holder checks again after it
// unlocks. A callback may therefore call CheckAndComplete or
// TryCompleteElseWatch, on this or another purgatory, without deadlock.
//
// # Lock order
//
//  1. an operation's lock (its own mutex or a shared operation.SharedLock);
//  2. a watcher shard's lock (package watchers);
//  3. the timer's locks: its striped reader/writer lock, then a bucket's.
//
// No user callback runs under a shard or timer lock. Callers must not call
// CheckAndComplete while holding a lock that some TryComplete takes (a
// SharedLock excepted): the check would have to leave a note for a holder
// that is waiting on the caller.
//
// # Memory
//
// A parked operation costs about 115 bytes beyond its own fields, watched on
// three keys (Kafka's: about 232). Watch lists hold a small Handle instead of
// the operation; completing the operation clears the Handle, so it is
// released from every key at once (Kafka leaves it on its other keys until a
// purge, which ran brokers out of memory in KAFKA-19389). The 8-byte slots
// left behind are dropped when their key is next checked, or by Kafka's purge,
// which here also waits until dead slots outnumber live ones, so that its cost
// is spread over at least as many completions as slots it visits.
//
// # Goroutines
//
// A purgatory runs one goroutine, the reaper: it advances the timer, runs
// expired operations' OnComplete and OnExpiration (one at a time, so keep
// them short), and purges. WithoutReaper runs none.
//
// # Shutdown
//
// Shutdown stops the reaper and the timer, then by default expires every
// pending operation (OnComplete, then OnExpiration), so that no parked
// request is left hanging; WithLeavePendingOnShutdown keeps Kafka's
// behaviour. After Shutdown, TryCompleteElseWatch returns ErrShutdown.
package purgatory
