package core

import (
	"sync"
	"unsafe"
)

// lockShards is the timer's reader/writer lock split in stripes. Add takes
// the read lock of one stripe, picked by the task's address; advancing the
// wheels takes every write lock. With a single sync.RWMutex, two cores adding
// at once spend most of an Add bouncing its reader count between their
// caches; striped, they rarely touch the same line. Advancing happens about
// once per tick at most, so paying for every stripe there is cheap.
type lockShards [lockStripes]paddedRWMutex

const lockStripes = 16

type paddedRWMutex struct {
	sync.RWMutex
	_ [128 - unsafe.Sizeof(sync.RWMutex{})]byte // keep stripes on separate cache lines
}

// stripe returns the stripe of an entry whose address hashes to i
// (entryIndex, opIndex).
func (l *lockShards) stripe(i uintptr) *sync.RWMutex { return &l[i%lockStripes].RWMutex }

// entryIndex and opIndex hash an entry's address to pick its stripes:
// hashing an address to spread a lock, nothing more. Entries are at least
// 56 bytes apart (in 64-byte size classes); drop the bits that rarely
// differ.
func entryIndex(e *Entry) uintptr { return uintptr(unsafe.Pointer(e)) >> 6 }
func opIndex(e *OpEntry) uintptr  { return uintptr(unsafe.Pointer(e)) >> 6 }

func (l *lockShards) lock() {
	for i := range l {
		l[i].Lock()
	}
}

func (l *lockShards) unlock() {
	for i := range l {
		l[i].Unlock()
	}
}
