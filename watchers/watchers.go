package watchers

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/purgatory-go/purgatory/operation"
)

// DefaultShards is Kafka's number of watcher-list shards.
const DefaultShards = 512

// Watchers maps keys to the operations watching them, in shards that each
// have their own lock, so that checks on different keys rarely contend. It
// is Kafka's WatcherList array plus its Watchers.
//
// A Watchers is safe for concurrent use. No user callback ever runs while a
// shard lock is held: Check copies a key's operations out, unlocks, and only
// then calls TryComplete. Lock order: an operation's lock, then a shard's.
type Watchers[K comparable] struct {
	shards  []shard[K]
	seed    maphash.Seed
	watched atomic.Int64 // entries on all lists
	bufs    sync.Pool    // *[]*operation.Base snapshots for Check
}

type shard[K comparable] struct {
	mu    sync.Mutex
	lists map[K]*list[K] // guarded by mu; a key is present only while its list is non-empty
	_     [40]byte       // keep neighbouring shards' locks off one cache line
}

// list holds the entries watching one key, as a circular doubly linked list.
type list[K comparable] struct {
	root entry[K]
	n    int
	key  K
}

// entry is one operation on one key's list. An operation watched on k keys
// has k entries, allocated together in a group.
type entry[K comparable] struct {
	op         *operation.Base
	prev, next *entry[K]
	list       *list[K]  // guarded by sh.mu; nil once unlinked
	sh         *shard[K] // set once, before linking
}

// group is the entries of one operation. It is what the operation's Base
// keeps, so that completing the operation can unlink it from every key at
// once instead of leaving it for a purge.
type group[K comparable] struct {
	w       *Watchers[K]
	entries []entry[K]
}

// New returns a Watchers with n shards (DefaultShards if n <= 0).
func New[K comparable](n int) *Watchers[K] {
	if n <= 0 {
		n = DefaultShards
	}
	w := &Watchers[K]{shards: make([]shard[K], n), seed: maphash.MakeSeed()}
	for i := range w.shards {
		w.shards[i].lists = make(map[K]*list[K])
	}
	w.bufs.New = func() any { s := make([]*operation.Base, 0, 16); return &s }
	return w
}

func (w *Watchers[K]) shard(key K) *shard[K] {
	return &w.shards[maphash.Comparable(w.seed, key)%uint64(len(w.shards))]
}

// Watch adds op to the list of each key. The caller holds op's lock (see
// package purgatory). If op completed while it was being added, it is taken
// off again before Watch returns. Duplicate keys are watched once each time
// they appear, as in Kafka.
func (w *Watchers[K]) Watch(op *operation.Base, keys []K) {
	g := &group[K]{w: w, entries: make([]entry[K], len(keys))}
	for i, k := range keys {
		e := &g.entries[i]
		e.op = op
		e.sh = w.shard(k)
		e.sh.mu.Lock()
		l := e.sh.lists[k]
		if l == nil {
			l = &list[K]{key: k}
			l.root.next, l.root.prev = &l.root, &l.root
			e.sh.lists[k] = l
		}
		l.pushLocked(e)
		e.sh.mu.Unlock()
	}
	w.watched.Add(int64(len(keys)))
	if !op.AttachWatch(g) {
		g.Unwatch() // completed meanwhile: do not leave it behind
	}
}

func (l *list[K]) pushLocked(e *entry[K]) {
	tail := l.root.prev
	e.prev, e.next = tail, &l.root
	tail.next = e
	l.root.prev = e
	e.list = l
	l.n++
}

// unlinkLocked removes e from its list, and the list from the shard's map
// when it empties. The caller holds e.sh.mu. It reports whether e was
// linked.
func (w *Watchers[K]) unlinkLocked(e *entry[K]) bool {
	l := e.list
	if l == nil {
		return false
	}
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next, e.list = nil, nil, nil
	l.n--
	if l.n == 0 && e.sh.lists[l.key] == l {
		// Only the list in the map is removed: a Watch that created a new
		// list for the key after CancelForKey keeps it.
		delete(e.sh.lists, l.key)
	}
	w.watched.Add(-1)
	return true
}

// Unwatch takes every entry of the group off its list.
func (g *group[K]) Unwatch() {
	for i := range g.entries {
		e := &g.entries[i]
		e.sh.mu.Lock()
		g.w.unlinkLocked(e)
		e.sh.mu.Unlock()
	}
}

// Check calls SafeTryComplete on every uncompleted operation watching key,
// and returns how many it completed (Kafka's tryCompleteWatched). Completed
// operations unlink themselves.
func (w *Watchers[K]) Check(key K) int {
	bp := w.snapshot(key)
	if bp == nil {
		return 0
	}
	completed := 0
	for _, op := range *bp {
		if !op.IsCompleted() && op.SafeTryComplete() {
			completed++
		}
	}
	w.release(bp)
	return completed
}

// snapshot copies key's operations under the shard lock, or returns nil.
func (w *Watchers[K]) snapshot(key K) *[]*operation.Base {
	sh := w.shard(key)
	sh.mu.Lock()
	l := sh.lists[key]
	if l == nil {
		sh.mu.Unlock()
		return nil
	}
	bp := w.bufs.Get().(*[]*operation.Base)
	for e := l.root.next; e != &l.root; e = e.next {
		*bp = append(*bp, e.op)
	}
	sh.mu.Unlock()
	return bp
}

func (w *Watchers[K]) release(bp *[]*operation.Base) {
	clear(*bp)
	if cap(*bp) > 1024 {
		return // do not keep a huge buffer for ever
	}
	*bp = (*bp)[:0]
	w.bufs.Put(bp)
}

// Cancel removes key and returns the operations that were watching it, in
// the order they were added (Kafka's cancelForKey). The operations are not
// completed and stay on their other keys' lists.
func (w *Watchers[K]) Cancel(key K) []*operation.Base {
	sh := w.shard(key)
	sh.mu.Lock()
	l := sh.lists[key]
	if l == nil {
		sh.mu.Unlock()
		return nil
	}
	ops := make([]*operation.Base, 0, l.n)
	for e := l.root.next; e != &l.root; e = l.root.next {
		ops = append(ops, e.op)
		w.unlinkLocked(e)
	}
	sh.mu.Unlock()
	return ops
}

// Purge removes entries of completed operations from every list and returns
// how many it removed (Kafka's purgeCompleted). Completion already unlinks
// operations, so this is a backstop.
func (w *Watchers[K]) Purge() int {
	purged := 0
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		for _, l := range sh.lists {
			for e := l.root.next; e != &l.root; {
				next := e.next
				if e.op.IsCompleted() && w.unlinkLocked(e) {
					purged++
				}
				e = next
			}
		}
		sh.mu.Unlock()
	}
	return purged
}

// Watched returns the number of entries on all lists: an operation watched
// on three keys counts three times (Kafka's PurgatorySize gauge). O(1).
func (w *Watchers[K]) Watched() int { return int(w.watched.Load()) }

// Keys returns the number of keys with a non-empty list. It visits every
// shard.
func (w *Watchers[K]) Keys() int {
	n := 0
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		n += len(sh.lists)
		sh.mu.Unlock()
	}
	return n
}

// Each calls f for every distinct uncompleted operation on any list. It
// copies them out first, so f may call any method of w.
func (w *Watchers[K]) Each(f func(*operation.Base)) {
	seen := make(map[*operation.Base]struct{})
	var ops []*operation.Base
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		for _, l := range sh.lists {
			for e := l.root.next; e != &l.root; e = e.next {
				if _, ok := seen[e.op]; !ok && !e.op.IsCompleted() {
					seen[e.op] = struct{}{}
					ops = append(ops, e.op)
				}
			}
		}
		sh.mu.Unlock()
	}
	for _, op := range ops {
		f(op)
	}
}
