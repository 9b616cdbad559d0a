// Package watchers keeps, for each key, the list of delayed operations
// watching it, in a map split into shards with a lock each (512 by default,
// as in Kafka). Package purgatory builds on it; most users need only that.
//
// Beyond Kafka, an operation's entries on all its keys are allocated
// together and attached to the operation, so that completing it through one
// key unlinks it from the others at once, instead of leaving it reachable
// until a purge. Watched therefore counts only live entries.
//
// Lock order: an operation's lock, then a shard's lock. No user callback runs
// under a shard lock: Check copies a key's operations out before calling
// TryComplete, so a callback may call Check, Watch or Cancel on any key.
package watchers
