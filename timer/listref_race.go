//go:build race

package timer

import (
	"sync/atomic"
	"unsafe"
)

// clear unlinks r. Under the race detector it is atomic, as every other
// access to r is (see listRef).
func (r *listRef) clear() { atomic.StorePointer(&r.p, nil) }

// set links r to b. Atomic under the race detector, like clear.
func (r *listRef) set(b *bucket) { atomic.StorePointer(&r.p, unsafe.Pointer(b)) }
