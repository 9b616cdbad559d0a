//go:build !race

package lifecycle

// clear takes the operation off every list holding h.
//
// It is a plain store, not an atomic one. Readers load h.op atomically
// and may see the operation for a moment after it completed; they then
// find it completed, as they do one that completes just after their load.
// Go's memory model lets such a read see either value of a word-sized
// variable, never a torn one. On amd64 the atomic store is an exchange,
// a locked instruction that waits for the Handle's line, which is on the
// core that parked the operation: a plain store lets the completion go on
// while the line comes over.
func (h *Handle) clear() { h.op = nil }
