package purgatory

// Leveled is implemented by operations that wait, on each key, for a
// quantity of that key that only rises to reach a level: a produce waits
// for the partition's high watermark to reach the offset after its
// records; a fetch waits for the partition to hold minBytes past its
// offset. Such an operation is watched on each key at WatchLevel(key), and
// CheckAndCompleteUpTo(key, level) tries it only once level reaches that,
// instead of every check of the key trying every operation on it.
//
// WatchLevel is called once per key when the operation is parked, before
// any lock is taken. An operation that does not implement Leveled is
// watched as before, and tried by CheckAndComplete only.
//
// Use levels when many operations wait on one key for different amounts
// of the same thing (a hot partition); plain CheckAndComplete when the
// condition is not one number, or few operations share a key.
type Leveled[K comparable] interface {
	WatchLevel(key K) int64
}
