package watchers

import (
	"github.com/purgatory-go/purgatory/internal/lifecycle"
)

// MaxChunk is the most entries one chunk of a list holds. A purge slice
// reads whole chunks, at least two, so it may visit up to two chunks more
// than its budget.
const MaxChunk = 255

// chunkCaps are the capacities of a list's chunks as it grows, up to
// MaxChunk. Each fills a size class of the allocator exactly. An object of
// more than 512 bytes that holds pointers starts with an 8-byte header
// (Go 1.22 and later), so the two largest hold one entry less than a power
// of two: a chunk of 256 entries, 2,056 bytes with its header, took the
// 2,304-byte class, 12% more than its entries
// (TestChunksFillTheirSizeClass).
var chunkCaps = [...]int{4, 8, 16, 32, 64, 127, MaxChunk}

// nextChunkCap returns the capacity of the chunk that follows one of
// capacity prev.
func nextChunkCap(prev int) int {
	for _, c := range chunkCaps {
		if c > prev {
			return c
		}
	}
	return MaxChunk
}

// newChunk allocates an empty chunk of capacity n.
func newChunk(n int) []*lifecycle.Handle { return make([]*lifecycle.Handle, 0, n) }

// push appends h. The caller holds the shard's lock.
func (l *list[K]) push(h *lifecycle.Handle) {
	if l.more == nil {
		if l.one == nil {
			l.one = h
			return
		}
		l.grow()
	}
	l.more.push(h)
}

func (l *entries) push(h *lifecycle.Handle) {
	if n := len(l.chunks); n > 0 {
		if c := l.chunks[n-1]; len(c) < cap(c) {
			l.chunks[n-1] = append(c, h)
			l.n++
			return
		}
	}
	l.chunks.Push(h)
	l.n++
}

// Chunks holds Handles in slices of the capacities chunkCaps gives, each
// allocated full size: entries are never copied as it grows.
type Chunks [][]*lifecycle.Handle

// Push appends h to the last chunk, or to a new one if that is full.
func (c *Chunks) Push(h *lifecycle.Handle) {
	last := len(*c) - 1
	if last < 0 || len((*c)[last]) == cap((*c)[last]) {
		prev := 0
		if last >= 0 {
			prev = cap((*c)[last])
		}
		*c = append(*c, newChunk(nextChunkCap(prev)))
		last++
	}
	(*c)[last] = append((*c)[last], h)
}
