package watchers

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// keeps reports the room an empty list keeps: plain entries in its
// chunks, chunks its slice of them has room for, and levelled entries.
func keeps[K comparable](l *list[K]) (entries, chunks, levels int) {
	if l.more == nil {
		return 1, 0, 0
	}
	for _, c := range l.more.chunks {
		entries += cap(c)
	}
	return entries, cap(l.more.chunks), cap(l.more.lv)
}

// A list that empties keeps room for a few entries, whatever it grew to
// and however it was emptied: by a check, by CheckUpTo, or by a purge in
// slices (which removes chunks at the front of a list, so that its first
// chunks can be the largest). It stays in the map, idle, and then on the
// shard's free list, for as long as the shard has room, so what it keeps
// is kept for a long time: it must not be what a burst left behind.
func TestEmptiedListKeepsLittle(t *testing.T) {
	for _, c := range []struct {
		how string
		n   int
	}{{"check", 10_000}, {"check-up-to", 10_000}, {"check-up-to", 20}, {"purge", 10_000}} {
		how := c.how
		t.Run(fmt.Sprintf("%s/n=%d", how, c.n), func(t *testing.T) {
			w := New[string](1)
			n := c.n
			levelled := how == "check-up-to"
			ops := watchMany(t, w, "hot", n, n+1, levelled) // all completed
			ops[0].ForceComplete()
			switch how {
			case "check":
				require.Equal(t, 0, w.Check("hot"))
			case "check-up-to":
				require.Equal(t, 0, w.CheckUpTo("hot", 1000))
			case "purge":
				endRound(t, w, 100, nil)
			}
			sh := &w.shards[0]
			l := sh.getLocked(maphashOf(w, "hot"), "hot")
			require.NotNil(t, l)
			require.True(t, l.empty())
			entries, chunks, levels := keeps(l)
			require.LessOrEqual(t, entries, chunkCaps[0]+chunkCaps[1], "plain entries")
			require.LessOrEqual(t, chunks, emptyChunkSlots, "chunks")
			require.LessOrEqual(t, levels, emptyLevels, "levelled entries")

			// Pushed out of the ring of idle lists, it goes to the free list
			// and keeps its first chunk only.
			for i := range maxIdle {
				k := string(rune('a' + i))
				o, h := parkOp(t, 1)
				w.Watch(h, []string{k}, nil, nil)
				o.ForceComplete()
				require.Equal(t, 0, w.Check(k))
			}
			require.Nil(t, sh.getLocked(maphashOf(w, "hot"), "hot"))
			require.Same(t, l, sh.free, "the list is reused")
			entries, chunks, levels = keeps(l)
			require.LessOrEqual(t, entries, chunkCaps[0], "plain entries")
			require.LessOrEqual(t, chunks, emptyChunkSlots, "chunks")
			require.LessOrEqual(t, levels, emptyLevels, "levelled entries")
		})
	}
}
