package watchers

import (
	"sort"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
)

// Levelled watches. An operation watched on a key at a level waits for a
// quantity of the key that only rises (a high watermark, bytes appended)
// to reach that level. CheckUpTo(key, level) tries only the operations at
// levels up to level. Kafka's Raft layer keeps such thresholds in a skip
// list; here a key's levelled entries are a slice sorted by level with a
// moving head:
//
//   - the entries due at level L are the prefix lv[lvHead:i], i found by
//     binary search: O(log n) to find, O(k) to take k of them;
//   - an entry whose level is at least the last one's is appended, O(1):
//     produce requests wait for offsets that grow with every append, and
//     fetches mostly do too. One that arrives out of order is moved into
//     place from the nearer end, O(log n) plus the entries it passes;
//   - the prefix a check has taken is cleared, and the slice is shifted
//     down once the head passes half of it, O(1) amortised.
//
// A due operation whose TryComplete still says no stays at the front, and
// is tried again by the next CheckUpTo: it is due, by its own level.

type levelled struct {
	level int64
	h     *lifecycle.Handle
}

// pushLevel inserts h at level, after any entries at the same level. The
// caller holds the shard's lock.
func (l *entries) pushLevel(level int64, h *lifecycle.Handle) {
	e := levelled{level, h}
	lv, head, n := l.lv, l.lvHead, len(l.lv)
	if n == head || lv[n-1].level <= level {
		l.lv = append(lv, e)
		return
	}
	pos := head + sort.Search(n-head, func(i int) bool { return lv[head+i].level > level })
	if head > 0 && pos-head < n-pos {
		// Nearer the front, and there is room there: shift the front left.
		copy(lv[head-1:pos-1], lv[head:pos])
		lv[pos-1] = e
		l.lvHead--
		return
	}
	lv = append(lv, levelled{})
	copy(lv[pos+1:], lv[pos:n])
	lv[pos] = e
	l.lv = lv
}

// dueLocked returns the end of the prefix of entries at levels up to
// level. The caller holds the shard's lock.
func (l *entries) dueLocked(level int64) int {
	head := l.lvHead
	return head + sort.Search(len(l.lv)-head, func(i int) bool { return l.lv[head+i].level > level })
}

// takeDueLocked drops the tombstones among the entries at levels up to
// level, keeping the live ones in order at the front, and calls live for
// each of those. It returns how many entries it dropped. The caller holds
// the shard's lock.
func (l *entries) takeDueLocked(level int64, live func(*lifecycle.Handle)) int {
	end := l.dueLocked(level)
	lv := l.lv
	w := end // live entries are packed down to lv[w:end]
	for r := end - 1; r >= l.lvHead; r-- {
		if lifecycle.Live(lv[r].h) {
			w--
			lv[w] = lv[r]
		}
	}
	dropped := w - l.lvHead
	clear(lv[l.lvHead:w])
	l.lvHead = w
	if live != nil {
		for _, e := range lv[w:end] {
			live(e.h)
		}
	}
	l.shrinkLevelsLocked()
	return dropped
}

// compactLevelsLocked drops every tombstone among the levelled entries,
// calls live for each live one, and returns how many it dropped.
func (l *entries) compactLevelsLocked(live func(*lifecycle.Handle)) int {
	lv := l.lv
	w := l.lvHead
	for r := l.lvHead; r < len(lv); r++ {
		if !lifecycle.Live(lv[r].h) {
			continue
		}
		if live != nil {
			live(lv[r].h)
		}
		lv[w] = lv[r]
		w++
	}
	dropped := len(lv) - w
	clear(lv[w:])
	l.lv = lv[:w]
	l.shrinkLevelsLocked()
	return dropped
}

// shrinkLevelsLocked moves the live entries down to the start once the
// cleared prefix is at least half the slice, and lets a slice that has
// emptied go if it grew large.
func (l *entries) shrinkLevelsLocked() {
	n := len(l.lv) - l.lvHead
	switch {
	case n == 0 && cap(l.lv) > 64:
		l.lv, l.lvHead = nil, 0
	case n == 0:
		l.lv, l.lvHead = l.lv[:0], 0
	case l.lvHead >= n:
		copy(l.lv, l.lv[l.lvHead:])
		clear(l.lv[n:])
		l.lv, l.lvHead = l.lv[:n], 0
	}
}

// CheckUpTo calls TryComplete on the live operations watching key at a
// level up to level, lowest level first, and returns how many it
// completed. Operations watching key without a level are left alone. It
// costs O(log n + k) for n entries on the key, k of them due, and drops
// the key once its list is empty.
func (w *Watchers[K]) CheckUpTo(key K, level int64) int { return w.checkUpTo(key, level) }
