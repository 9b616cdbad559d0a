package watchers

import (
	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"slices"
	"sync"
)

// A purge visits every entry of every list, and a hot key can hold
// hundreds of thousands. Done in one go, under the shard's lock and on the
// reaper, it held up every expiry and every Watch of that key for tens of
// milliseconds. So the purgatory purges in slices: each PurgeSlice visits
// about a budget of entries, holds a shard's lock for one list's share of
// them at a time, and leaves a cursor for the next slice.
//
// Between slices anything may happen to a list: pushes append to it, a
// check compacts it whole, it is emptied and removed, or freed and reused
// for another key. The cursor tolerates all of it. Packing a run of chunks
// (or of levelled entries) in place is correct wherever the run starts, so
// a cursor made stale by a compaction only makes the slice skip or revisit
// some entries; a list out of its shard's map (gone) is left alone, since
// Remove reads it after letting go of the lock.

// purgeRound is the state of a purge done in slices. It is guarded by mu,
// and the lists it points into by their shards' locks.
type purgeRound[K comparable] struct {
	mu    sync.Mutex
	on    bool       // a round is under way
	shard int        // the shard being visited
	lists []*list[K] // that shard's lists, taken when the visit began
	next  int        // the next of lists to visit
	cur   *list[K]   // the list being compacted, or nil
	chunk int        // where in cur.chunks the next slice starts
	level int        // where in cur.lv the next slice starts
}

// maxKeptLists is the largest list snapshot kept between rounds.
const maxKeptLists = 4096

// PurgeSlice does the next part of a purge, visiting about budget entries,
// and reports how many tombstones it dropped and whether the round has
// more to do. The first slice after a round has ended starts another. A
// round visits every list that was in the map when it reached the list's
// shard, drops the tombstones it finds and the lists left empty (Kafka's
// purgeCompleted and removeKeyIfEmpty, a part at a time). A list compacted
// by a check between two slices may have some entries skipped until the
// next round; they are the fewer for that compaction.
func (w *Watchers[K]) PurgeSlice(budget int) (purged int, more bool) {
	ps := &w.purge
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if !ps.on {
		ps.on, ps.shard, ps.next, ps.cur = true, -1, 0, nil
		ps.lists = ps.lists[:0]
	}
	used := 0
	for used < budget {
		if ps.cur == nil {
			if ps.next == len(ps.lists) {
				if !w.nextShardLocked(ps) {
					break
				}
				used++ // so that a round over empty shards ends too
				continue
			}
			ps.cur, ps.lists[ps.next] = ps.lists[ps.next], nil
			ps.next++
			ps.chunk, ps.level = 0, 0
		}
		sh := &w.shards[ps.shard]
		sh.mu.Lock()
		l, done := ps.cur, true
		// A pinned list is left to the next round: a walk is under way,
		// and compacts it when it ends if nothing else walks it.
		if !l.gone && !l.pinned() {
			var dropped, visited int
			dropped, visited, done = l.purgeSliceLocked(&ps.chunk, &ps.level, budget-used)
			purged += dropped
			used += visited
			if done && l.empty() {
				w.emptiedLocked(sh, l)
			}
		}
		sh.mu.Unlock()
		used++
		if done {
			ps.cur = nil
		}
	}
	w.watched[0].n.Add(int64(-purged))
	return purged, ps.on
}

// nextShardLocked moves ps to the next shard and takes its lists, or ends
// the round after the last shard and reports false. The caller holds ps.mu.
func (w *Watchers[K]) nextShardLocked(ps *purgeRound[K]) bool {
	clear(ps.lists)
	ps.lists, ps.next = ps.lists[:0], 0
	if cap(ps.lists) > maxKeptLists {
		ps.lists = nil
	}
	ps.shard++
	if ps.shard == len(w.shards) {
		ps.on = false
		return false
	}
	sh := &w.shards[ps.shard]
	sh.mu.Lock()
	for _, head := range sh.lists {
		for l := head; l != nil; l = l.next {
			ps.lists = append(ps.lists, l)
		}
	}
	sh.mu.Unlock()
	return true
}

// purgeSliceLocked drops the tombstones among about budget entries of l,
// from the cursor on (plain entries from chunk *chunk, then levelled ones
// from *level), moves the cursor past them, and reports how many it
// dropped, how many it visited, and whether it reached the end of l. The
// caller holds the shard's lock.
func (l *list[K]) purgeSliceLocked(chunk, level *int, budget int) (dropped, visited int, done bool) {
	if l.more != nil {
		return l.more.purgeSliceLocked(chunk, level, budget)
	}
	if l.one != nil && !lifecycle.Live(l.one) {
		l.one = nil
		return 1, 1, true
	}
	return 0, 1, true
}

func (l *entries) purgeSliceLocked(chunk, level *int, budget int) (dropped, visited int, done bool) {
	if *chunk < len(l.chunks) {
		// At least two chunks: a slice that starts in a part-full chunk must
		// also read the next one to get anywhere.
		start, end := *chunk, *chunk
		for end < len(l.chunks) && (visited < budget || end-start < 2) {
			visited += len(l.chunks[end])
			end++
		}
		// Pack the live entries of chunks[start:end] from the start of
		// chunks[start], as compactLocked does for the whole list. Writing
		// never overtakes reading, since every chunk's capacity is at least
		// its length.
		wc, wi := start, 0
		for i := start; i < end; i++ {
			for _, h := range l.chunks[i] { // the header as it was: what to read
				if !lifecycle.Live(h) {
					dropped++
					continue
				}
				if wi == cap(l.chunks[wc]) {
					wc, wi = wc+1, 0
				}
				l.chunks[wc] = l.chunks[wc][:wi+1]
				l.chunks[wc][wi] = h
				wi++
			}
		}
		// Clear to the capacity: the collector scans the whole array.
		c := l.chunks[wc][:cap(l.chunks[wc])]
		clear(c[wi:])
		l.chunks[wc] = c[:wi]
		// chunks[empty:end] hold nothing now. Drop them, but keep one at the
		// end of the list for the pushes to come.
		empty := wc + 1
		if wi == 0 {
			empty = wc
		}
		last := end == len(l.chunks)
		if last && empty < end {
			c := l.chunks[empty][:cap(l.chunks[empty])]
			clear(c)
			l.chunks[empty] = c[:0]
			empty++
		}
		l.chunks = slices.Delete(l.chunks, empty, end)
		l.n -= dropped
		// The next slice starts at the chunk this one left part full, so
		// that it is filled and partial chunks do not pile up.
		*chunk = empty
		if wi > 0 && wi < cap(l.chunks[wc]) {
			*chunk = wc
		}
		if !last {
			return dropped, visited, false
		}
		*chunk = len(l.chunks)
		if visited >= budget && len(l.lv) > l.lvHead {
			return dropped, visited, false
		}
	}
	lv := l.lv
	a := max(*level, l.lvHead)
	if a < len(lv) {
		b := min(a+max(budget-visited, 1), len(lv))
		w := a
		for r := a; r < b; r++ {
			if lifecycle.Live(lv[r].h) {
				lv[w] = lv[r]
				w++
			}
		}
		visited += b - a
		dropped += b - w
		n := w + copy(lv[w:], lv[b:])
		clear(lv[n:])
		l.lv = lv[:n]
		*level = w
		if b < len(lv) {
			return dropped, visited, false
		}
	}
	l.shrinkLevelsLocked()
	return dropped, visited, true
}
