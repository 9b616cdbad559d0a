// Package watchers keeps, for each key, the list of delayed operations
// watching it, in a map split into shards with a lock each (512 by default,
// as in Kafka): Kafka's WatcherList array and its Watchers. It is internal:
// package purgatory is its only user, and its lists hold lifecycle Handles.
//
// Lists hold an operation's lifecycle.Handle rather than the operation.
// Completing or cancelling an operation clears its Handle, so it is
// released from every key at once, without waiting for a purge and without
// taking any list's lock (Kafka keeps completed operations on their other
// keys until a purge; KAFKA-19389 ran brokers out of memory that way). What
// remains is an 8-byte tombstone per key, dropped when the key is next
// checked or purged; a key whose list empties is removed then, as Kafka's
// removeKeyIfEmpty does, once 8 newer empty lists of its shard push it out
// of the shard's ring (so that a hot key keeps its list between requests).
//
// Once every operation is gone, what remains does not depend on how many
// keys were used: a shard whose map has shrunk to a quarter of its peak
// moves its lists to a fresh map (a Go map keeps the room it grew to), and
// an emptied list keeps room for a few entries only. Each shard keeps its
// 8 idle lists and 2 more, free for new keys, each with room for 12
// entries and 16 levelled ones: with 512 shards and TopicPartitionKey
// keys, 1 MB after plain keys with a few entries each
// (TestMemoryFollowsKeysInUse), and about 3 MB whatever the lists held.
//
// Lock order: an operation's lock, then a shard's lock. No user callback runs
// under a shard lock: Check copies a key's operations out before calling
// TryComplete, so a callback may call Check, Watch or Remove on any key.
package watchers
