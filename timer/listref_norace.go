//go:build !race

package timer

import "unsafe"

// clear unlinks r; the caller holds the lock of the bucket r names. A plain
// store: Go's memory model lets a racing word-sized read see only the old
// value or the new one, and the write barrier the compiler emits keeps the
// collector's view exact.
func (r *listRef) clear() { r.p = nil }

// set links r to b; the caller holds b's lock and the entry's addLock. A
// plain store, for the same reasons as clear.
func (r *listRef) set(b *bucket) { r.p = unsafe.Pointer(b) }
