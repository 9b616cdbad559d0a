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

func (l *lockShards) stripe(e *Entry) *sync.RWMutex {
	// Tasks are at least 64 bytes apart; drop the bits that never differ.
	return &l[(uintptr(unsafe.Pointer(e))>>6)%lockStripes].RWMutex
}

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
