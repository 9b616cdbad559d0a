//go:build race

package timer

import "sync/atomic"

// clear unlinks r. Under the race detector it is atomic, as every other
// access to r is (see listRef).
func (r *listRef) clear() { atomic.StorePointer(&r.p, nil) }
