package watchers

import (
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
)

// DefaultShards is Kafka's number of watcher-list shards.
const DefaultShards = 512

// Watchers maps keys to the operations watching them, in shards that each
// have their own lock, so that checks on different keys rarely contend. It
// is Kafka's WatcherList array plus its Watchers.
//
// A list holds each operation's lifecycle.Handle, 8 bytes a key. When an
// operation completes or is cancelled, its Handle lets go of it: from then
// on the list entries are tombstones, which are dropped the next time the
// key is checked or purged. Nothing a list holds keeps a completed
// operation reachable, and a key whose list empties is removed, so memory
// follows live keys, not every key ever used.
//
// A Watchers is safe for concurrent use. No user callback runs while a shard
// lock is held: Check copies a key's live operations out, unlocks, and only
// then calls TryComplete. Lock order: an operation's lock, then a shard's.
type Watchers[K comparable] struct {
	shards []shard[K]
	seed   maphash.Seed
	// watched counts the entries on all lists, tombstones included, in
	// stripes picked by shard: parks and checks of different keys, on
	// different cores, then change different cache lines. Each stripe
	// alone may be negative; the sum is the count.
	watched [countStripes]countStripe
	bufs    sync.Pool // *[]*lifecycle.Handle: the levelled entries a check tries
	purge   purgeRound[K]

	// BetweenKeys, if set, runs in Watch after each key but the last.
	// Tests set it, to act between two keys; nil otherwise.
	BetweenKeys func()
}

type shard[K comparable] struct {
	mu sync.Mutex
	// checks counts the checks that have looked up a key of this shard,
	// found or not. It is changed only under mu, and read without it by
	// Mark: see Marks.
	checks atomic.Uint64
	// lists is keyed by the key's 64-bit hash, which also picked the shard,
	// so a key is hashed once per call; keys whose hashes collide share a
	// chain. Guarded by mu. A list that a check or the purge finds empty is
	// removed (Kafka's removeKeyIfEmpty): keys such as a member id or a
	// request id are used once, and must not cost memory for ever.
	lists map[uint64]*list[K]
	n     int // lists in the map, chains included
	// peak is the most lists the map has held since it was made. A Go
	// map keeps the room it grew to when its entries are deleted, so a
	// burst of keys would cost its peak for ever: once a quarter of the
	// peak is left, the lists move to a fresh map (see removeLocked).
	// Guarded by mu.
	peak int
	// free holds up to maxFree emptied lists, linked by next, each with its
	// first chunk, for the next new keys of this shard: a key used once (a
	// request id, a member id) then costs no allocation, while what is
	// kept stays bounded whatever the churn of keys. Guarded by mu.
	free  *list[K]
	nfree int
	// idle holds, in a ring, the lists that a check or the purge emptied
	// most recently. They stay in the map until pushed out of the ring,
	// and are removed then if they are still empty: a hot key that a check
	// empties and the next request watches again keeps its list, where
	// removing it at once (as Kafka's removeKeyIfEmpty does) cost a map
	// delete and insert per request; keys used once are still removed, a
	// few lists later. Guarded by mu.
	idle   [maxIdle]*list[K]
	idleAt int // next slot of the ring
}

const countStripes = 16

type countStripe struct {
	n atomic.Int64
	_ [128 - unsafe.Sizeof(atomic.Int64{})]byte
}

// count returns the stripe of the entry count for the shard of hash.
func (w *Watchers[K]) count(hash uint64) *atomic.Int64 {
	return &w.watched[w.shardIndex(hash)%countStripes].n
}

// maxFree is how many emptied lists a shard keeps for new keys, and
// maxIdle how many empty lists it leaves in its map. Keys used once take
// lists from the free list and give them back one at a time, as the ring
// pushes them out, so a short free list serves them: BenchmarkKeyChurn
// makes 2 allocations a request with maxFree 2, 1 or 8, serial or
// parallel, and 5 with none. Each list kept costs about 200 bytes, for
// ever, in each of 512 shards.
const (
	maxFree = 2
	maxIdle = 8
)

// list holds one key's entries. A key that only one operation watches (a
// request id, a member id: a key of its own) holds its entry in one, and
// costs the list alone, 48 bytes for a string key. A second entry, or one
// at a level, moves them to more, which holds them in chunks: chunks never
// move once allocated, so a hot key with hundreds of thousands of entries
// grows without copying them, and slack is at most two chunks (the last,
// and the one where a purge in steps stopped; see purge.go). Once a list
// has more, it keeps it (with the room an empty list keeps, trimLocked)
// until it is removed: a hot key that drains and fills again allocates
// nothing.
//
// Measured with BenchmarkHeapPerKeyedOperation (keys=1-own): 283 bytes an
// operation on a key of its own with the chunks in the list itself, where
// the list, a first chunk of 4 and the slice of chunks took 152 of them.
type list[K comparable] struct {
	key  K
	next *list[K] // another key with the same hash
	one  *lifecycle.Handle
	more *entries
	idle bool // in its shard's ring of idle lists
	gone bool // out of its shard's map (removed, or freed for reuse)
}

// entries are a list's entries once it has had more than one, or one at a
// level.
//
// Operations watched at a level (purgatory.Leveled) are kept apart, in lv,
// sorted by level (see levels.go).
//
// A check walks the plain entries in order (see walk). While it does, the
// list is pinned (walkers > 0): nothing moves an entry, and a walk's
// place, a sequence number, stays good across its windows. Only pops from
// the head are allowed then; popped counts them, so the first entry's
// sequence number is popped.
type entries struct {
	chunks  Chunks     // full but the first, the last and one a purge slice ended in
	n       int        // entries in all chunks
	popped  uint64     // entries popped from the head, ever
	walkers int        // walks under way; while > 0, entries do not move
	lv      []levelled // lv[lvHead:] sorted by level; before lvHead, cleared
	lvHead  int
}

// empty reports whether l holds no entry, live or dead.
func (l *list[K]) empty() bool {
	if l.more == nil {
		return l.one == nil
	}
	return l.more.empty()
}

func (m *entries) empty() bool { return m.n == 0 && len(m.lv) == m.lvHead }

// pinned reports whether a walk has l's entries pinned (see entries).
func (l *list[K]) pinned() bool { return l.more != nil && l.more.walkers > 0 }

// size is how many entries l holds, live or dead.
func (l *list[K]) size() int {
	if l.more == nil {
		if l.one != nil {
			return 1
		}
		return 0
	}
	return l.more.n + len(l.more.lv) - l.more.lvHead
}

// grow gives l its entries, moving the one it held into them. The caller
// holds the shard's lock.
func (l *list[K]) grow() *entries {
	if l.more == nil {
		l.more = &entries{}
		if l.one != nil {
			l.more.push(l.one)
			l.one = nil
		}
	}
	return l.more
}

// An empty list keeps room for a few entries, so that a hot key that
// drains and fills again allocates nothing: its first two chunks, if they
// are the smallest (chunkCaps[0]+chunkCaps[1] entries), a slice with room
// for emptyChunkSlots chunks, and emptyLevels levelled entries. Whatever
// more it grew to is let go when it empties: it stays in the shard's ring
// of idle lists and then on its free list, and what those keep must not
// be what a burst of entries left behind.
const (
	emptyChunkSlots = 4
	emptyLevels     = 16
)

// trimLocked lets an empty list go of what it holds beyond the room an
// empty list keeps. The caller holds the shard's lock.
func (l *list[K]) trimLocked() {
	if l.more != nil {
		l.more.trimLocked()
	}
}

func (l *entries) trimLocked() {
	if cap(l.chunks) > emptyChunkSlots {
		l.chunks = nil
	}
	// A purge in slices deletes chunks where it emptied them, so the
	// first chunks need not be the smallest.
	for i, c := range l.chunks {
		if i == 2 || cap(c) > chunkCaps[i] {
			clear(l.chunks[i:])
			l.chunks = l.chunks[:i]
			break
		}
	}
	if cap(l.lv) > emptyLevels {
		l.lv = nil
	}
	l.lv, l.lvHead = l.lv[:0], 0
}

// New returns a Watchers with n shards (DefaultShards if n <= 0).
func New[K comparable](n int) *Watchers[K] {
	if n <= 0 {
		n = DefaultShards
	}
	w := &Watchers[K]{shards: make([]shard[K], n), seed: maphash.MakeSeed()}
	for i := range w.shards {
		w.shards[i].lists = make(map[uint64]*list[K])
	}
	w.bufs.New = func() any { s := make([]*lifecycle.Handle, 0, 16); return &s }
	return w
}

func (w *Watchers[K]) locate(key K) (*shard[K], uint64) {
	h := maphash.Comparable(w.seed, key)
	return w.shardOf(h), h
}

// shardOf returns the shard of a key whose hash is h.
func (w *Watchers[K]) shardOf(h uint64) *shard[K] { return &w.shards[w.shardIndex(h)] }

// shardIndex maps the hash h into [0, shards) with a multiplication
// rather than a division: the hash's high bits, scaled. A 64-bit division
// takes 40-90 cycles, and a park made seven (three in Mark, three in
// Watch, one for the count); maphash's bits are uniform, so the scaled
// ones are too.
func (w *Watchers[K]) shardIndex(h uint64) uint64 {
	hi, _ := bits.Mul64(h, uint64(len(w.shards)))
	return hi
}

// getLocked returns key's list, or nil. The caller holds sh.mu.
func (sh *shard[K]) getLocked(h uint64, key K) *list[K] {
	for l := sh.lists[h]; l != nil; l = l.next {
		if l.key == key {
			return l
		}
	}
	return nil
}

// getOrAddLocked returns key's list, creating it if needed.
func (sh *shard[K]) getOrAddLocked(h uint64, key K) *list[K] {
	if l := sh.getLocked(h, key); l != nil {
		return l
	}
	return sh.addLocked(h, key)
}

// addLocked adds an empty list for key, whose hash is h and which has
// none, and returns it. The caller holds the shard's lock.
func (sh *shard[K]) addLocked(h uint64, key K) *list[K] {
	l := sh.free
	if l != nil {
		sh.free, sh.nfree = l.next, sh.nfree-1
		l.key, l.next, l.gone = key, sh.lists[h], false
	} else {
		l = &list[K]{key: key, next: sh.lists[h]}
	}
	sh.lists[h] = l
	sh.n++
	sh.peak = max(sh.peak, sh.n)
	return l
}

// emptiedLocked records that l, which is in the map, has just emptied: it
// joins the ring of idle lists, and the list it pushes out of the ring is
// removed if it is still empty and still the map's list for its key (a
// CancelForKey may have removed it meanwhile, and a new list taken its
// key).
func (w *Watchers[K]) emptiedLocked(sh *shard[K], l *list[K]) {
	l.trimLocked()
	if l.idle {
		return
	}
	old := sh.idle[sh.idleAt]
	sh.idle[sh.idleAt] = l
	sh.idleAt = (sh.idleAt + 1) % maxIdle
	l.idle = true
	if old == nil {
		return
	}
	old.idle = false
	if old.empty() {
		h := maphash.Comparable(w.seed, old.key)
		if sh.getLocked(h, old.key) == old {
			sh.dropEmptyLocked(h, old.key)
		}
	}
}

// dropEmptyLocked removes key's list, which is empty, and keeps it for
// reuse if the shard has room.
func (sh *shard[K]) dropEmptyLocked(h uint64, key K) {
	l := sh.removeLocked(h, key)
	if l == nil || sh.nfree >= maxFree || l.pinned() {
		// A pinned list is still held by a walk, which must find it gone,
		// not reused for another key.
		return
	}
	var zero K
	l.key = zero // do not keep the user's key reachable
	l.idle = false
	l.trimLocked()
	if m := l.more; m != nil && len(m.chunks) > 1 {
		clear(m.chunks[1:])
		m.chunks = m.chunks[:1]
	}
	l.next, sh.free = sh.free, l
	sh.nfree++
}

// removeLocked takes key's list out of the shard.
func (sh *shard[K]) removeLocked(h uint64, key K) *list[K] {
	for pp := (*list[K])(nil); ; {
		var l *list[K]
		if pp == nil {
			l = sh.lists[h]
		} else {
			l = pp.next
		}
		if l == nil {
			return nil
		}
		if l.key == key {
			l.gone = true
			switch {
			case pp != nil:
				pp.next = l.next
			case l.next != nil:
				sh.lists[h] = l.next
			default:
				delete(sh.lists, h)
			}
			sh.n--
			if sh.n <= sh.peak/4 && sh.peak > smallMap {
				sh.remapLocked()
			}
			return l
		}
		pp = l
	}
}

// smallMap is how many entries a map holds in its first group of slots,
// the least it costs: a shard that never held more has nothing to give
// back.
const smallMap = 8

// remapLocked moves the shard's lists to a fresh map, so that the room a
// map grew to for many more keys than it now holds is let go. It runs once
// a quarter of the peak is left, so the lists it moves are at most a third
// of those removed since the last move: O(1) a removal, amortised.
func (sh *shard[K]) remapLocked() {
	m := make(map[uint64]*list[K], sh.n)
	for h, l := range sh.lists {
		m[h] = l
	}
	sh.lists, sh.peak = m, sh.n
}

// Watch adds h to the list of each key; with levels (one per key), at
// that level (see CheckUpTo). The caller holds the operation's lock (see
// package purgatory). A key given twice is watched twice, as in Kafka. If
// the operation completes meanwhile, the entries are tombstones from the
// start and cost 8 bytes each (16 at a level) until the next check or
// purge.
//
// With m, which Mark filled for the same keys, Watch reports whether a
// check may have looked for the operation on one of its keys before it was
// there, since Mark (see Marks); the caller then tries the operation
// again. Without m it reports true.
func (w *Watchers[K]) Watch(h *lifecycle.Handle, keys []K, levels []int64, m *Marks) (missed bool) {
	marked := m != nil && m.n == len(keys) && len(keys) > 0
	if marked && levels == nil && w.BetweenKeys == nil {
		return w.watchMarked(h, keys, m)
	}
	missed = !marked
	var first uint64
	for i, k := range keys {
		if i > 0 && w.BetweenKeys != nil {
			w.BetweenKeys()
		}
		var sh *shard[K]
		var hash uint64
		if marked {
			hash = m.hashes[i]
			sh = w.shardOf(hash)
		} else {
			sh, hash = w.locate(k)
		}
		if i == 0 {
			first = hash
		}
		sh.mu.Lock()
		if marked && sh.checks.Load() != m.checks[i] {
			missed = true
		}
		l := sh.getOrAddLocked(hash, k)
		if levels != nil {
			l.grow().pushLevel(levels[i], h)
		} else {
			l.push(h)
		}
		sh.mu.Unlock()
	}
	if len(keys) > 0 {
		w.count(first).Add(int64(len(keys)))
	}
	return missed
}

// watchMarked is Watch of plain entries on keys that Mark has hashed, the
// park's path, written out: it is most of a park's work.
func (w *Watchers[K]) watchMarked(h *lifecycle.Handle, keys []K, m *Marks) (missed bool) {
	for i := range keys {
		hash := m.hashes[i]
		sh := w.shardOf(hash)
		sh.mu.Lock()
		if sh.checks.Load() != m.checks[i] {
			missed = true
		}
		l := sh.getLocked(hash, keys[i])
		switch {
		case l == nil:
			sh.addLocked(hash, keys[i]).push(h)
		case l.more != nil:
			l.more.push(h)
		case l.one == nil:
			l.one = h
		default:
			l.push(h)
		}
		sh.mu.Unlock()
	}
	w.count(m.hashes[0]).Add(int64(len(keys)))
	return missed
}

// compactChunksLocked drops the tombstones among the plain entries,
// keeping the order of the rest, and returns how many it dropped. Freed
// chunks at the end are released. It moves entries: the caller holds the
// shard's lock, and no walk has the list pinned.
func (l *entries) compactChunksLocked() int {
	wc, wi := 0, 0 // write position: chunk, index
	for _, c := range l.chunks {
		for _, h := range c {
			if !lifecycle.Live(h) {
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
	kept := 0
	for i := range l.chunks {
		switch {
		case i < wc:
			kept += len(l.chunks[i])
		case i == wc:
			// Clear to the capacity, not the length: the copies left behind
			// by compaction are past the length, and the collector scans the
			// whole array.
			c := l.chunks[i][:cap(l.chunks[i])]
			clear(c[wi:])
			l.chunks[i] = c[:wi]
			kept += wi
		case i == wc+1:
			// Keep one emptied chunk: a hot key that drains and fills again
			// would otherwise allocate a chunk every few requests.
			c := l.chunks[i][:cap(l.chunks[i])]
			clear(c)
			l.chunks[i] = c[:0]
		default:
			l.chunks[i] = nil
		}
	}
	l.chunks = l.chunks[:min(wc+2, len(l.chunks))]
	dropped := l.n - kept
	l.n = kept
	return dropped
}

// each calls f for every entry, in order: the plain entries, then those at
// a level, lowest first.
func (l *list[K]) each(f func(*lifecycle.Handle)) {
	if l.more == nil {
		if l.one != nil {
			f(l.one)
		}
		return
	}
	l.more.each(f)
}

func (l *entries) each(f func(*lifecycle.Handle)) {
	for _, c := range l.chunks {
		for _, h := range c {
			f(h)
		}
	}
	for _, e := range l.lv[l.lvHead:] {
		f(e.h)
	}
}

// Check calls TryComplete on every live operation watching key, and
// returns how many it completed (Kafka's tryCompleteWatched): those
// watching without a level in the order they were added, then those at a
// level, lowest level first. It drops the key's tombstones on the way,
// and the key itself once its list is empty.
func (w *Watchers[K]) Check(key K) int { return w.walk(key, math.MaxInt) }

// CheckN is Check that stops once n operations have completed. Its cost
// follows the operations it tries, not those watching: it never copies or
// compacts the whole list. n < 1 tries nothing.
func (w *Watchers[K]) CheckN(key K, n int) int {
	if n < 1 {
		return 0
	}
	return w.walk(key, n)
}

// window is how many entries a walk copies out of a list at a time: a
// check holds the shard's lock while it copies a window, and tries the
// window's operations with no lock held. Its buffer is on the stack, so
// that a check allocates nothing however many operations watch the key
// (and what it holds goes when the check returns: it is not cleared).
const window = 64

// walk is Check (n = math.MaxInt) and CheckN. It tries the plain entries
// a window at a time, from the head of the list, up to the end the list
// had when the walk began: the operations parked since made a TryComplete
// of their own after this check's event. While it walks, the list is
// pinned (entries.walkers): nothing moves its entries but pops from the
// head, so the walk's place, an entry's sequence number, stays good
// across the windows. A walk pops the tombstones it finds at the head.
// Then, for a full check, it tries the levelled entries, copied out at
// once, and compacts the list if it saw a tombstone and no other walk is
// under way.
func (w *Watchers[K]) walk(key K, n int) int {
	sh, hash := w.locate(key)
	sh.mu.Lock()
	// Counted before the lookup, found or not: a Watch of this key that
	// comes after learns that this check did not see it (see Marks).
	sh.checks.Add(1)
	l := sh.getLocked(hash, key)
	if l == nil {
		sh.mu.Unlock()
		return 0
	}
	if l.more == nil {
		return w.checkOne(sh, hash, l)
	}
	m := l.more
	m.walkers++
	pos, end := m.popped, m.popped+uint64(m.n)
	var buf [window]*lifecycle.Handle
	completed, dropped, tried := 0, 0, 0
	dead := false
	for completed < n {
		// A window as large as what is left to complete, and as what has
		// been tried: a CheckN(key, 1) whose first try completes copies one
		// operation, and one whose tries decline doubles its window.
		size := min(max(n-completed, tried, 1), window)
		var k, d int
		k, pos, d = m.windowLocked(pos, end, buf[:size])
		dropped += d
		if k == 0 {
			break
		}
		sh.mu.Unlock()
		c, gone := lifecycle.TryEach(buf[:k], n-completed)
		completed += c
		dead = dead || gone > 0
		tried += k
		sh.mu.Lock()
		if l.gone {
			// Removed (CancelForKey, CompleteForKey) while the window was
			// tried: Remove reads the list without the shard's lock, and
			// the walk must not touch it again.
			sh.mu.Unlock()
			w.count(hash).Add(int64(-dropped))
			return completed
		}
	}
	m.walkers--
	// The operations the walk completed are tombstones now, at the head
	// when they were the oldest: pop them, so the next walk starts at a
	// live entry.
	if completed > 0 {
		dropped += m.popDeadLocked()
	}
	var ops []*lifecycle.Handle
	var bp *[]*lifecycle.Handle
	if n == math.MaxInt {
		if m.walkers == 0 && (dead || completed > 0) {
			dropped += m.compactChunksLocked()
		}
		if len(m.lv) > m.lvHead {
			bp = w.bufs.Get().(*[]*lifecycle.Handle)
			ops = *bp
			dropped += m.compactLevelsLocked(func(h *lifecycle.Handle) { ops = append(ops, h) })
		}
	} else if completed < n && len(m.lv) > m.lvHead {
		bp = w.bufs.Get().(*[]*lifecycle.Handle)
		ops = *bp
		dropped += m.takeDueLocked(math.MaxInt64, func(h *lifecycle.Handle) { ops = append(ops, h) })
	}
	if l.empty() {
		w.emptiedLocked(sh, l)
	}
	sh.mu.Unlock()
	w.count(hash).Add(int64(-dropped))
	if bp != nil {
		completed += w.tryAndDrop(sh, hash, key, ops, bp, n-completed)
	}
	return completed
}

// checkOne is walk for a list that holds one entry at most, whose shard's
// lock the caller holds; checkOne lets go of it.
func (w *Watchers[K]) checkOne(sh *shard[K], hash uint64, l *list[K]) int {
	h := l.one
	dropped := 0
	if h != nil && !lifecycle.Live(h) {
		h, l.one, dropped = nil, nil, 1
	}
	if l.empty() {
		w.emptiedLocked(sh, l)
	}
	sh.mu.Unlock()
	if dropped > 0 {
		w.count(hash).Add(-1)
	}
	if h == nil {
		return 0
	}
	if done, _ := lifecycle.TryEach([]*lifecycle.Handle{h}, 1); done == 0 {
		return 0
	}
	// Drop the tombstone it left, as Kafka's tryCompleteWatched does, so
	// that a key used once is let go at once.
	// A TryComplete that watched another operation on the key meanwhile
	// made the list grow: the tombstone is then the head of its entries.
	sh.mu.Lock()
	dropped = 0
	switch {
	case l.gone:
	case l.more != nil:
		dropped = l.more.popDeadLocked()
	case l.one != nil && !lifecycle.Live(l.one):
		l.one, dropped = nil, 1
	}
	if !l.gone && dropped > 0 && l.empty() {
		w.emptiedLocked(sh, l)
	}
	sh.mu.Unlock()
	w.count(hash).Add(int64(-dropped))
	return 1
}

// tryAndDrop tries ops, the levelled operations a walk copied into the
// pooled buffer bp, until n have completed, gives the buffer back, and
// drops the tombstones of those that completed.
func (w *Watchers[K]) tryAndDrop(sh *shard[K], hash uint64, key K, ops []*lifecycle.Handle, bp *[]*lifecycle.Handle, n int) int {
	completed, _ := lifecycle.TryEach(ops, n)
	clear(ops)
	*bp = ops[:0]
	w.bufs.Put(bp)
	if completed == 0 {
		return 0
	}
	sh.mu.Lock()
	dropped := 0
	if l := sh.getLocked(hash, key); l != nil && l.more != nil {
		if dropped = l.more.compactLevelsLocked(nil); l.empty() {
			w.emptiedLocked(sh, l)
		}
	}
	sh.mu.Unlock()
	w.count(hash).Add(int64(-dropped))
	return completed
}

// windowLocked copies into buf the plain entries from sequence number
// pos (or the head, if the head has passed it) up to end, at most
// len(buf) of them, tombstones included: the try passes over those, and
// copying is all the shard's lock is held for. A walk at the head first
// pops the tombstones there. It reports how many entries it copied, where
// the next window starts, and how many entries it popped. The caller
// holds the shard's lock and has pinned the list.
func (l *entries) windowLocked(pos, end uint64, buf []*lifecycle.Handle) (k int, next uint64, popped int) {
	if pos <= l.popped {
		popped = l.popDeadLocked()
		pos = l.popped
	}
	// Find the chunk that holds pos: chunks before the last are full, but
	// the first may have been popped from the front, so count them.
	off, c := int(pos-l.popped), 0
	for c < len(l.chunks) && off >= len(l.chunks[c]) {
		off -= len(l.chunks[c])
		c++
	}
	for left := int(end - min(pos, end)); left > k && k < len(buf); c, off = c+1, 0 {
		chunk := l.chunks[c][off:]
		k += copy(buf[k:min(len(buf), left)], chunk)
	}
	return k, pos + uint64(k), popped
}

// popDeadLocked pops the tombstones at the head of the plain entries, and
// reports how many. Popping moves no other entry: it is what a pinned
// list allows.
func (l *entries) popDeadLocked() int {
	popped := 0
	for l.n > 0 {
		// Chunks before the first entry are empty: a compaction leaves an
		// emptied chunk that the pushes after it skip if it is not the last.
		for len(l.chunks[0]) == 0 {
			l.chunks[0] = nil
			l.chunks = l.chunks[1:]
		}
		c := l.chunks[0]
		if lifecycle.Live(c[0]) {
			break
		}
		c[0] = nil
		switch {
		case len(c) > 1:
			l.chunks[0] = c[1:]
		case len(l.chunks) > 1:
			l.chunks[0] = nil
			l.chunks = l.chunks[1:]
		default:
			l.chunks[0] = c[:0] // the last chunk: keep its room for pushes
		}
		l.popped++
		l.n--
		popped++
	}
	return popped
}

// checkUpTo is CheckUpTo: under the shard's lock it drops the tombstones
// among the due entries and copies the live operations among them out;
// then, with no lock held, it tries each; and if any completed, it drops
// their entries, tombstones now, as Kafka's tryCompleteWatched does.
func (w *Watchers[K]) checkUpTo(key K, level int64) int {
	sh, hash := w.locate(key)
	sh.mu.Lock()
	sh.checks.Add(1) // as in walk
	l := sh.getLocked(hash, key)
	if l == nil || l.more == nil {
		sh.mu.Unlock()
		return 0 // no entry at a level
	}
	bp := w.bufs.Get().(*[]*lifecycle.Handle)
	ops := *bp
	dropped := l.more.takeDueLocked(level, func(h *lifecycle.Handle) { ops = append(ops, h) })
	if l.empty() {
		w.emptiedLocked(sh, l)
	}
	sh.mu.Unlock()
	w.count(hash).Add(int64(-dropped))

	completed, _ := lifecycle.TryEach(ops, math.MaxInt)
	// The buffer goes back to the pool whatever its size: a check that
	// dropped it would allocate a new one every time. The pool lets go of
	// it at the next collections if no check uses it.
	clear(ops)
	*bp = ops[:0]
	w.bufs.Put(bp)
	if completed > 0 {
		sh.mu.Lock()
		dropped := 0
		if l := sh.getLocked(hash, key); l != nil && l.more != nil {
			if dropped = l.more.takeDueLocked(level, nil); l.empty() {
				w.emptiedLocked(sh, l)
			}
		}
		sh.mu.Unlock()
		w.count(hash).Add(int64(-dropped))
	}
	return completed
}

// Remove removes key and returns the live operations that were watching
// it, each once (the first half of Kafka's cancelForKey; the caller
// cancels them): those watching without a level in the order they were
// added, then those watching at a level, lowest level first and, at one
// level, in the order they were added.
func (w *Watchers[K]) Remove(key K) []*lifecycle.Op {
	sh, hash := w.locate(key)
	sh.mu.Lock()
	l := sh.removeLocked(hash, key)
	sh.mu.Unlock()
	if l == nil {
		return nil
	}
	n := l.size()
	w.count(hash).Add(int64(-n))
	var ops []*lifecycle.Op
	seen := make(map[*lifecycle.Op]struct{}, n)
	l.each(func(h *lifecycle.Handle) {
		if op := lifecycle.OpOf(h); op != nil {
			if _, dup := seen[op]; !dup {
				seen[op] = struct{}{}
				ops = append(ops, op)
			}
		}
	})
	return ops
}

// Watched returns the number of entries on all lists, counting an
// operation once per key, tombstones included (Kafka's PurgatorySize
// counts the same way). It sums a few stripes. Package purgatory reports
// live entries instead, from its operations' own counts.
func (w *Watchers[K]) Watched() int {
	var n int64
	for i := range w.watched {
		n += w.watched[i].n.Load()
	}
	return int(n)
}

// Keys returns the number of keys with a list. It visits every shard.
func (w *Watchers[K]) Keys() int {
	n := 0
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Each calls f once for every live operation on any list. It copies them
// out first, so f may call any method of w.
func (w *Watchers[K]) Each(f func(*lifecycle.Op)) {
	seen := make(map[*lifecycle.Op]struct{})
	var ops []*lifecycle.Op
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		for _, head := range sh.lists {
			for l := head; l != nil; l = l.next {
				l.each(func(h *lifecycle.Handle) {
					if op := lifecycle.OpOf(h); op != nil {
						if _, dup := seen[op]; !dup {
							seen[op] = struct{}{}
							ops = append(ops, op)
						}
					}
				})
			}
		}
		sh.mu.Unlock()
	}
	for _, op := range ops {
		f(op)
	}
}
