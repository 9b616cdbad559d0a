package timer

import (
	"sync/atomic"
	"unsafe"
)

// listRef is TaskBase.list: the bucket an entry is linked into, or nil.
// It is read without a lock, to find which bucket's lock to take, and
// read again under that lock before the entry is touched. It is written
// only under the lock of the bucket it names (set) or named (clear), and
// set only by a goroutine holding the entry's addLock (an Add, or the
// reaper refiling the entry), so no two goroutines link one entry at
// once. Both writes are plain stores outside race-detector builds
// (listref_norace.go): on amd64 an atomic store is an exchange, a locked
// instruction, and every Add links an entry and every flush unlinks the
// entries it takes. A lock-free reader that sees the bucket a moment
// after it was cleared takes the bucket's lock, and then sees nil.
type listRef struct{ p unsafe.Pointer }

func (r *listRef) Load() *bucket { return (*bucket)(atomic.LoadPointer(&r.p)) }
