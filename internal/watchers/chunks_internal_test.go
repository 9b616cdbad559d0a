package watchers

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
)

// A chunk costs the heap its entries and, past 512 bytes, the allocator's
// 8-byte header: nothing is lost to rounding up to a larger size class.
func TestChunksFillTheirSizeClass(t *testing.T) {
	const n = 1000
	keep := make([][]*lifecycle.Handle, n)
	for _, c := range chunkCaps {
		// The least of three tries, so that whatever else the process
		// allocates meanwhile does not count against the chunks.
		per := 0.0
		for try := range 3 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := range keep {
				keep[i] = newChunk(c)
			}
			runtime.ReadMemStats(&after)
			if p := float64(after.TotalAlloc-before.TotalAlloc) / n; try == 0 || p < per {
				per = p
			}
		}
		// The next size class up is at least 64 bytes larger.
		require.LessOrEqual(t, per, float64(8*c+8+16), "bytes allocated for a chunk of %d entries", c)
		require.Equal(t, c, cap(keep[0]))
	}
	runtime.KeepAlive(keep)
}

// Chunks grow through chunkCaps and then stay at MaxChunk.
func TestChunksGrowThroughTheirCapacities(t *testing.T) {
	var c Chunks
	h := &lifecycle.Handle{}
	total := 0
	for _, n := range chunkCaps {
		total += n
	}
	for range total + 2*MaxChunk {
		c.Push(h)
	}
	var caps []int
	for _, ch := range c {
		require.Equal(t, len(ch), cap(ch))
		caps = append(caps, cap(ch))
	}
	require.Equal(t, append(chunkCaps[:], MaxChunk, MaxChunk), caps)
}
