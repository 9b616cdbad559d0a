package watchers

import "math"

// Purge drops the tombstones of completed operations from every list, and
// the lists left empty, in one go, and returns how many entries it dropped.
// A round of PurgeStep under way is abandoned: this one covers every list.
// The purgatory purges in steps; this is for tests.
func (w *Watchers[K]) Purge() int {
	w.purge.mu.Lock()
	w.purge.on = false
	w.purge.mu.Unlock()
	n, _ := w.PurgeStep(math.MaxInt)
	return n
}
