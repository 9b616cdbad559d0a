//go:build race

package lifecycle

import "sync/atomic"

// clear takes the operation off every list holding h. Under the race
// detector it is atomic, as every access to h.op is (see clear.go).
func (h *Handle) clear() { atomic.StorePointer(&h.op, nil) }
