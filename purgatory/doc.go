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
// # Many waiters on one key
//
// A queue, a job or a topic served to long-polling consumers parks many
// operations on one key, and one event answers one of them:
// CheckAndCompleteN(key, 1) tries them oldest first and stops at the first
// that completes, at a cost that follows the operations tried, not those
// waiting. A client that hangs up is ended with Complete(op, cause), which
// waits for a TryComplete of op under way, so that what that TryComplete
// claimed is never stranded; ForceComplete takes no lock and would win.
//
// # Exactly once
//
// OnComplete runs exactly once per operation, whoever completes it:
// TryCompleteElseWatch, CheckAndComplete on any of its keys, ForceComplete
// from user code, Complete or CompleteForKey, expiry, its context
// (operation.WithContext), or Shutdown; the operation's Cause says which. OnExpiration runs only when expiry (or
// Shutdown) won. Every operation follows one state machine (created, parked,
// watched, timed, then completed or cancelled) whose counting transitions
// are single compare-and-swaps, so Stats are exact once nothing is in
// flight; docs/purgatory.md has the table.
//
// # Where callbacks run
//
// OnComplete runs on the goroutine that completed the operation: the one
// calling CheckAndComplete, TryCompleteElseWatch or ForceComplete; the
// reaper goroutine for an expiry; the goroutine context.AfterFunc starts for
// a context. A reply channel written from OnComplete must be buffered, or
// the send must not block.
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
// Kafka always makes that last TryComplete. Here each watcher shard counts
// the checks that look up its keys, and A reads the counts of its keys'
// shards before its first TryComplete and again as it watches each key:
// only if one moved can a check have missed the operation, and only then,
// or if a check found the lock held and left a note (below), is the last
// TryComplete made. An operation parked while no check touched its keys'
// shards costs one TryComplete, not two. A change with no CheckAndComplete
// after it is not a wake-up, for an operation being parked as for one
// already watched.
//
// Kafka's story goes on: because Kafka's locks are re-entrant, a callback can
// check an operation whose lock its own thread holds. Go's mutexes are not
// re-entrant, so a check here never waits for an operation's lock: if the
// lock is held, it leaves a note, and the holder checks again after it
// unlocks. A callback may therefore call CheckAndComplete or
// TryCompleteElseWatch, on this or another purgatory, without deadlock: a
// park of an operation whose operation.SharedLock is held is finished by
// whoever unlocks it. ResetTimeout and CompleteForKey take no lock of the
// operation's, and may be called from anywhere.
//
// # Timeouts
//
// The last step of a park, still under the operation's lock, adds its
// timeout to the timer, and only then does the operation count in
// NumDelayed. No timer.Timer runs a task inside Add: a timeout that is due
// already runs on whatever advances the timer (the reaper, AdvanceClock, a
// timer.MockTimer's Advance), and the expiry waits for the operation's
// lock, so it never comes between the steps of a park. A test that waits
// for NumDelayed() == n and then advances a MockTimer past the timeout
// therefore expires all n. A timer of package timer (the purgatory's own,
// or a MockTimer) stages a timeout 800 ms or more away and files it into its
// wheels within 400 ms, at the deadline the park fixed; an operation that
// completes before then takes it out with one compare-and-swap. The
// purgatory reads its clock through the timer's Now, whatever the timer
// (with WithoutTimer, timer.SystemClock), and inside a testing/synctest
// bubble a purgatory made with default options runs on the bubble's fake
// time. Make it inside the bubble: one made outside runs on the real
// clock, and its Shutdown, called inside, dies with "send on synctest
// channel from outside bubble".
//
// # Lock order
//
//  1. an operation's lock (its own mutex or a shared operation.SharedLock);
//  2. a watcher shard's lock;
//  3. the timer's locks: its striped reader/writer lock, then a task's
//     add-lock, then a bucket's.
//
// A park holds 1 while it adds the timeout (3); the expiry, run by whoever
// advances the timer, takes 1 holding none of 3, and under it holds the
// add-lock of the operation's timer entry for a few instructions, letting
// go before any callback. No user callback runs under a shard or timer
// lock. Callers must not call
// CheckAndComplete while holding a lock that some TryComplete takes (a
// SharedLock excepted): the check would have to leave a note for a holder
// that is waiting on the caller. CancelForKey and Shutdown wait for
// operations' locks, so do not call them from a callback.
//
// # Observing
//
// Stats are plain counters, read when asked. For more, install an
// Observer with WithObserver: it is told of each park (with the
// operation's context, the parent of a span), each departure (outcome,
// cause, time in purgatory, TryComplete calls) and each ErrFull or
// ErrShutdown refusal, on the goroutine that caused it, so it must not
// block. What its Parked returns is handed to its Left: per-operation
// state without a map. Without an observer, the request path reads no
// clock and allocates nothing for it; with one, each park and departure
// reads the clock once and each parked operation gets a 96-byte record of
// its own.
// Modules of their own build on it: contrib/timing is an observer that
// keeps the time-in-purgatory histograms, contrib/prometheus and
// contrib/otel export the figures, and contrib/otel traces each parked
// operation. docs/observing.md has the details.
//
// # Memory
//
// A parked operation costs about 98 bytes beyond its own fields, watched on
// three keys (Kafka's: about 232): a park allocates nothing but the
// operation. Watch lists hold a handle instead of the operation (a word
// of the timer's, the slot of its timeout); completing or cancelling the
// operation clears the handle,
// so it is released from every key at once (Kafka leaves it on its other keys
// until a purge, which ran brokers out of memory in KAFKA-19389). The 8-byte
// slots left behind are dropped when their key is next checked, and a key
// left empty is removed then; or by Kafka's purge, which here also waits
// until dead slots outnumber live ones, so that its cost is spread over at
// least as many completions as slots it visits, and done a step of about
// 16,000 slots at a time so that a hot key's purge never holds up expiries
// for long. WithMaxPending bounds the
// operations pending at once (ErrFull beyond it; its doc says what holds
// a place).
//
// # Goroutines
//
// A purgatory runs one goroutine, the reaper: it advances the timer, runs
// expired operations' OnComplete and OnExpiration (one at a time, so keep
// them short), and purges. WithoutReaper runs none: the caller advances
// the timer with AdvanceClock.
//
// # Shutdown
//
// Shutdown stops the reaper and the timer, then by default expires every
// pending operation (OnComplete, then OnExpiration), so that no parked
// request is left hanging; WithLeavePendingOnShutdown keeps Kafka's
// behaviour. After Shutdown, TryCompleteElseWatch returns ErrShutdown.
package purgatory
