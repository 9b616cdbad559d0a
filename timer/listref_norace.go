//go:build !race

package timer

// clear unlinks r; the caller holds the lock of the bucket r names. A plain
// store: Go's memory model lets a racing word-sized read see only the old
// value or the new one, and the write barrier the compiler emits keeps the
// collector's view exact.
func (r *listRef) clear() { r.p = nil }
