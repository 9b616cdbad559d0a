package watchers

import "math"

// Purge drops the tombstones of completed operations from every list, and
// the lists left empty, in one go, and returns how many entries it dropped.
// A round of PurgeSlice under way is abandoned: this one covers every list.
// The purgatory purges in slices; this is for tests.
func (w *Watchers[K]) Purge() int {
	w.purge.mu.Lock()
	w.purge.on = false
	w.purge.mu.Unlock()
	n, _ := w.PurgeSlice(math.MaxInt)
	return n
}
