package timer

import (
	"sync/atomic"
	"unsafe"
)

// listRef is TaskBase.list: the bucket an entry is linked into, or nil.
// It is read without a lock, to find which bucket's lock to take, and
// read again under that lock before the entry is touched. The swap that
// links an entry is atomic. The store that unlinks it is made under the
// bucket's lock and is a plain store outside race-detector builds
// (listref_norace.go): on amd64 an atomic store is an exchange, a locked
// instruction, and a flush unlinks every entry it expires. A lock-free
// reader that sees the bucket a moment after it was cleared takes the
// bucket's lock, and then sees nil.
type listRef struct{ p unsafe.Pointer }

func (r *listRef) Load() *bucket { return (*bucket)(atomic.LoadPointer(&r.p)) }

func (r *listRef) CompareAndSwap(old, b *bucket) bool {
	return atomic.CompareAndSwapPointer(&r.p, unsafe.Pointer(old), unsafe.Pointer(b))
}
