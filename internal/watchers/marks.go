package watchers

// Marks records, for the keys of one operation, how many checks each key's
// shard had seen before the operation's first TryComplete, so that the
// Watch that follows can tell whether a check may have missed it.
//
// A check that looks up a key before the operation is on that key's list
// cannot find it, and the operation's first TryComplete may have run
// before the change the check was made for. Kafka therefore calls
// TryComplete a second time once every key is watched. That second call is
// only needed if such a check happened: a check counts itself under the
// shard's lock, the Watch adds the operation under the same lock, so a
// check that came first is counted by the time the Watch reads the count.
// If Mark's earlier reading already saw that check, the change it was made
// for came before the first TryComplete, which saw it (the Go memory
// model: the check's count is an atomic written after the change). So
// unless a count moved between Mark and Watch, the first TryComplete has
// seen everything a check could have missed. A check that comes after
// the operation is on the list finds it, and if it finds the operation's
// lock held it leaves a note for the holder (package lifecycle).
type Marks struct {
	n      int // keys marked; 0 when there were more than maxMarks
	hashes [maxMarks]uint64
	checks [maxMarks]uint64
}

// maxMarks is how many keys Marks follows. An operation watched on more
// keys is always tried a second time.
const maxMarks = 8

// Mark fills m for keys. The caller holds the operation's lock and has
// not yet called its first TryComplete.
func (w *Watchers[K]) Mark(keys []K, m *Marks) {
	m.n = 0
	if len(keys) > maxMarks {
		return
	}
	for i, k := range keys {
		sh, hash := w.locate(k)
		m.hashes[i], m.checks[i] = hash, sh.checks.Load()
	}
	m.n = len(keys)
}
