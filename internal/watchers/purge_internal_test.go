package watchers

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/optest"
)

var purgeTracker lifecycle.Tracker

// parkOp parks a new operation as the purgatory does, for n watches.
func parkOp(t *testing.T, n int) (*optest.Op, *lifecycle.Handle) {
	t.Helper()
	o := optest.New(time.Hour)
	lo := lifecycle.Of(o)
	require.Equal(t, lifecycle.Accepted, lifecycle.Park(lo, &purgeTracker, 0, n, false))
	h, err := lifecycle.AddTimeout(lo, nil, nil)
	require.NoError(t, err)
	lifecycle.Arrived(lo, &purgeTracker, n)
	return o, h
}

// checkLists checks every list's layout, and that Watched counts what the
// lists hold, and returns the operations each key's entries refer to, live
// or not, plain ones first.
func checkLists(t *testing.T, w *Watchers[string]) map[string][]*lifecycle.Handle {
	t.Helper()
	got := make(map[string][]*lifecycle.Handle)
	total := 0
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		for _, head := range sh.lists {
			for l := head; l != nil; l = l.next {
				require.False(t, l.gone, "a list in the map is marked gone")
				if l.more == nil {
					l.each(func(h *lifecycle.Handle) { got[l.key] = append(got[l.key], h) })
					total += l.size()
					continue
				}
				m := l.more
				n, partial := 0, 0
				for j, c := range m.chunks {
					n += len(c)
					for _, h := range c[len(c):cap(c)] {
						require.Nil(t, h, "key %q chunk %d keeps an entry past its length", l.key, j)
					}
					if j < len(m.chunks)-1 {
						require.NotEmpty(t, c, "key %q: an empty chunk %d of %d", l.key, j, len(m.chunks))
						if len(c) < cap(c) {
							partial++
						}
					}
				}
				require.Equal(t, m.n, n, "key %q: n", l.key)
				require.LessOrEqual(t, partial, 1, "key %q: partial chunks before the last", l.key)
				for _, e := range m.lv[:m.lvHead] {
					require.Nil(t, e.h, "key %q: an entry before lvHead", l.key)
				}
				for _, e := range m.lv[len(m.lv):cap(m.lv)] {
					require.Nil(t, e.h, "key %q: an entry past the levels' length", l.key)
				}
				require.True(t, slices.IsSortedFunc(m.lv[m.lvHead:], func(a, b levelled) int {
					return int(a.level - b.level)
				}), "key %q: levels out of order", l.key)
				l.each(func(h *lifecycle.Handle) { got[l.key] = append(got[l.key], h) })
				total += l.size()
			}
		}
		sh.mu.Unlock()
	}
	require.Equal(t, total, w.Watched(), "Watched")
	return got
}

// live returns the operations of hs that have not completed, in order.
func live(hs []*lifecycle.Handle) []*lifecycle.Op {
	var ops []*lifecycle.Op
	for _, h := range hs {
		if op := lifecycle.OpOf(h); op != nil {
			ops = append(ops, op)
		}
	}
	return ops
}

// watchMany watches n new operations on key, at levels if levelled, and
// completes all but every keep-th. It returns them all.
func watchMany(t *testing.T, w *Watchers[string], key string, n, keep int, levelled bool) []*optest.Op {
	t.Helper()
	ops := make([]*optest.Op, n)
	for i := range ops {
		o, h := parkOp(t, 1)
		var levels []int64
		if levelled {
			levels = []int64{int64(i % 97)}
		}
		w.Watch(h, []string{key}, levels, nil)
		ops[i] = o
	}
	for i, o := range ops {
		if i%keep != 0 {
			o.ForceComplete()
		}
	}
	return ops
}

// endRound calls PurgeSlice(budget) until the round under way ends, calling
// each (if not nil) with what each step purged, and returns the steps.
func endRound(t *testing.T, w *Watchers[string], budget int, each func(purged int)) int {
	t.Helper()
	for steps := 1; ; steps++ {
		require.Less(t, steps, 10000, "the round does not end")
		purged, more := w.PurgeSlice(budget)
		if each != nil {
			each(purged)
		}
		if !more {
			return steps
		}
	}
}

// A purge in slices of random sizes against a reference, with everything
// that can happen to a list between two steps: watches, plain and
// levelled; completions; checks, which compact the list whole; and
// removals, which take the list out of the map (a step must then leave it
// alone, since Remove reads it without the lock) and later bring the key
// back in a new or reused list. After every action the lists keep their
// layout and each key is watched by exactly the live operations the
// reference says, plain ones in the order they came. At the end, a round
// with nothing between its steps leaves no tombstone.
func TestPurgeSliceModel(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 7))
		w := New[string](2)
		type watched struct {
			op    *optest.Op
			level int64 // -1: plain
		}
		model := make(map[string][]watched)
		var all []*optest.Op
		for range 2000 {
			switch k := r.IntN(20); {
			case k < 8: // watch on one or two keys, a third of them at levels
				ks := []string{keys[r.IntN(len(keys))]}
				if other := keys[r.IntN(len(keys))]; r.IntN(2) == 0 && other != ks[0] {
					ks = append(ks, other)
				}
				o, h := parkOp(t, len(ks))
				var levels []int64
				if r.IntN(3) == 0 {
					for range ks {
						levels = append(levels, int64(r.IntN(100)))
					}
				}
				w.Watch(h, ks, levels, nil)
				for i, k := range ks {
					lv := int64(-1)
					if levels != nil {
						lv = levels[i]
					}
					model[k] = append(model[k], watched{o, lv})
				}
				all = append(all, o)
			case k < 13: // complete one from outside
				if len(all) > 0 {
					all[r.IntN(len(all))].ForceComplete()
				}
			case k < 18:
				w.PurgeSlice(1 + r.IntN(300))
			case k < 19:
				w.Check(keys[r.IntN(len(keys))])
			default:
				k := keys[r.IntN(len(keys))]
				var want []*lifecycle.Op
				for _, e := range model[k] {
					if !e.op.IsCompleted() && !slices.Contains(want, lifecycle.Of(e.op)) {
						want = append(want, lifecycle.Of(e.op))
					}
				}
				got := w.Remove(k)
				require.ElementsMatch(t, want, got, "seed %d: Remove(%q)", seed, k)
				delete(model, k)
			}
			lists := checkLists(t, w)
			for _, k := range keys {
				var plain, levelled []*lifecycle.Op
				for _, e := range model[k] {
					if e.op.IsCompleted() {
						continue
					}
					if e.level < 0 {
						plain = append(plain, lifecycle.Of(e.op))
					} else {
						levelled = append(levelled, lifecycle.Of(e.op))
					}
				}
				got := live(lists[k])
				require.Len(t, got, len(plain)+len(levelled), "seed %d key %q: live entries", seed, k)
				require.True(t, slices.Equal(plain, got[:len(plain)]), "seed %d key %q: plain entries", seed, k)
				require.ElementsMatch(t, levelled, got[len(plain):], "seed %d key %q: levelled entries", seed, k)
			}
		}
		// End the round under way, then do one with nothing between its
		// steps.
		endRound(t, w, 50, nil)
		endRound(t, w, 50, nil)
		for k, hs := range checkLists(t, w) {
			require.Len(t, live(hs), len(hs), "seed %d key %q: tombstones after a whole round", seed, k)
		}
	}
}

// A step whose cursor is in a list that Remove then takes out of the map
// must not touch that list: Remove reads it after letting go of the lock.
func TestPurgeSliceLeavesARemovedListAlone(t *testing.T) {
	w := New[string](1)
	ops := watchMany(t, w, "x", 3000, 2, false)
	n, more := w.PurgeSlice(1000)
	require.True(t, more)
	require.Positive(t, n)
	require.NotNil(t, w.purge.cur, "the round stopped inside x's list")
	l := w.purge.cur
	got := w.Remove("x")
	require.Len(t, got, 1500)
	before := slices.Clone(l.more.chunks)
	for i := range before {
		before[i] = slices.Clone(before[i])
	}
	for i := 0; i < len(ops); i += 4 {
		ops[i].ForceComplete() // tombstones a step would drop, were it to look
	}
	endRound(t, w, 1000, nil)
	require.Equal(t, before, l.more.chunks, "the removed list was changed")
}

// A round in small steps over a long list leaves it as packed as a purge
// in one go would: each step starts in the chunk the previous one left
// part full, so at most one partial chunk comes before the last.
func TestPurgeSliceKeepsSlackBounded(t *testing.T) {
	w := New[string](1)
	watchMany(t, w, "x", 5000, 3, false)
	steps := endRound(t, w, 100, func(int) { checkLists(t, w) })
	require.Greater(t, steps, 10)
	hs := checkLists(t, w)["x"]
	require.Len(t, live(hs), len(hs), "tombstones left")
	require.Len(t, hs, 1667)
	chunks := w.shards[0].lists[maphashOf(w, "x")].more.chunks
	slots := 0
	for _, c := range chunks {
		slots += cap(c)
	}
	require.LessOrEqual(t, slots, len(hs)+2*MaxChunk, "slack: %d slots for %d entries", slots, len(hs))
}

func maphashOf(w *Watchers[string], key string) uint64 {
	_, h := w.locate(key)
	return h
}

// Each step visits about its budget of entries, plain or levelled, however
// long the list: a hot key's purge is spread over many steps instead of
// holding the shard's lock (and the reaper) for the whole list.
func TestPurgeSliceIsBounded(t *testing.T) {
	for _, levelled := range []bool{false, true} {
		w := New[string](4)
		const n, budget = 8000, 500
		watchMany(t, w, "hot", n, 4, levelled)
		total := 0
		steps := endRound(t, w, budget, func(purged int) {
			require.LessOrEqual(t, purged, budget+2*MaxChunk, "levelled %v: one step", levelled)
			total += purged
		})
		require.Equal(t, n*3/4, total, "levelled %v", levelled)
		require.GreaterOrEqual(t, steps, n/(budget+2*MaxChunk), "levelled %v", levelled)
		require.Equal(t, n/4, w.Watched())
		hs := checkLists(t, w)["hot"]
		require.Len(t, live(hs), n/4)
	}
}
