package watchers_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/purgatory-go/purgatory/internal/watchers"
)

// A burst of keys, all of them checked and gone, leaves a shard holding
// what it held before the burst, give or take its few emptied lists: its
// map does not keep the room it grew to.
func TestBurstOfKeysIsLetGo(t *testing.T) {
	w := watchers.New[int](1)
	before := heapAlloc()
	const n = 20_000
	ops := make([]*op, n)
	for k := range ops {
		ops[k] = newOp()
		w.Watch(park(ops[k], 1), []int{k}, nil, nil)
	}
	for k, o := range ops {
		o.Ready.Store(true)
		ops[k] = nil
		assert.Equal(t, 1, w.Check(k))
	}
	assert.LessOrEqual(t, w.Keys(), 8, "the shard's idle lists")
	held := heapAlloc() - before
	t.Logf("held after %d keys: %d B", n, held)
	assert.Less(t, held, int64(16<<10), "bytes held after %d keys are gone", n)
	runtime.KeepAlive(w)
}

func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
