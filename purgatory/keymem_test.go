package purgatory_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/purgatory-go/purgatory/purgatory"
)

// heldAfterKeys parks ops operations on keys keys, three keys each (the
// i-th on keys i, i+1 and i+2, modulo keys), completes them all, half by
// ForceComplete and half by CheckAndComplete, checks every key so that
// the entries of the first half are dropped too, and returns how much more
// heap the purgatory then holds than it did empty.
//
// The purgatory has no timer: a timer holds nothing for a key, and the
// wheels it makes on demand, and the timeouts held back for it, would blur
// what the keys cost.
func heldAfterKeys(tb testing.TB, keys, ops int) int64 {
	tb.Helper()
	p, err := purgatory.New[tpKey, *mockOp]("keys", purgatory.WithoutTimer())
	if err != nil {
		tb.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	heapAlloc()
	empty := heapAlloc()

	key := func(k int) tpKey { return tpKey{Topic: "t", Partition: int32(k % keys)} }
	all := make([]*mockOp, ops)
	for i := range all {
		all[i] = newOp(time.Hour)
		if done, err := p.TryCompleteElseWatch(all[i], key(i), key(i+1), key(i+2)); err != nil || done {
			tb.Fatalf("park %d: %v %v", i, done, err)
		}
	}
	for i, o := range all {
		if i%2 == 0 {
			o.ForceComplete()
		} else {
			o.Ready.Store(true)
		}
	}
	for k := range keys {
		p.CheckAndComplete(key(k))
	}
	all = nil
	if n := p.NumDelayed(); n != 0 {
		tb.Fatalf("%d operations pending", n)
	}
	if n := purgatory.WatchedKeys(p); n > keys/2 {
		tb.Fatalf("%d keys of %d still have a list", n, keys)
	}
	heapAlloc()
	held := heapAlloc() - empty
	runtime.KeepAlive(p)
	return held
}

// BenchmarkHeapPerGoneKey reports the heap a purgatory still holds for
// each key that was used and is gone: 2,000,000 operations on 100,000
// keys, three each, all completed. Run it by hand:
//
//	go test -run '^$' -bench HeapPerGoneKey -benchtime 1x ./purgatory
func BenchmarkHeapPerGoneKey(b *testing.B) {
	const keys, ops = 100_000, 2_000_000
	for b.Loop() {
		b.ReportMetric(float64(heldAfterKeys(b, keys, ops))/keys, "heap-B/gone-key")
	}
}

// Invariant 6 for keys: once every operation has completed and been
// released, what the purgatory holds does not grow with the number of keys
// that were used. One that has used 100,000 keys holds what one that has
// used 10,000 holds: the few emptied lists each shard keeps for hot keys
// and new ones, about 1 MB for 512 shards, 10 B for each of 100,000 keys
// that are gone. A Go map keeps the room it grew to after its entries are
// deleted: a shard map left at its peak costs about 24 B for each key
// that is gone, and fails this.
func TestMemoryFollowsKeysInUse(t *testing.T) {
	const small, large = 10_000, 100_000
	heldSmall := heldAfterKeys(t, small, small)
	heldLarge := heldAfterKeys(t, large, large)
	perKey := float64(heldLarge) / large
	growth := float64(heldLarge-heldSmall) / (large - small)
	t.Logf("held after %d keys: %d B; after %d keys: %d B (%.1f B a key); growth %.2f B a key",
		small, heldSmall, large, heldLarge, perKey, growth)
	assert.Less(t, growth, 2.0, "bytes held for each key used beyond %d", small)
	assert.Less(t, perKey, 20.0, "bytes held for each key that is gone")
}

// BenchmarkKeyChurn parks an operation on a key used once (a request id,
// a member id) and completes it with CheckAndComplete on that key: every
// request adds a key to a shard and, a few requests later, removes one.
// In parallel, each goroutine uses keys of its own.
func BenchmarkKeyChurn(b *testing.B) {
	churn := func(b *testing.B, p *purgatory.Purgatory[tpKey, *mockOp], k tpKey) {
		o := newOp(time.Hour)
		if done, err := p.TryCompleteElseWatch(o, k); err != nil || done {
			b.Fatal("not parked", err)
		}
		o.Ready.Store(true)
		if p.CheckAndComplete(k) != 1 {
			b.Fatal("not completed")
		}
	}
	newChurn := func(b *testing.B) *purgatory.Purgatory[tpKey, *mockOp] {
		p, err := purgatory.New[tpKey, *mockOp]("churn", purgatory.WithoutTimer(), purgatory.WithoutReaper())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
		return p
	}
	b.Run("serial", func(b *testing.B) {
		p := newChurn(b)
		b.ReportAllocs()
		for i := int32(0); b.Loop(); i++ {
			churn(b, p, tpKey{Topic: "churn", Partition: i})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		p := newChurn(b)
		var seq atomic.Int32
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			topic := "churn-" + strconv.Itoa(int(seq.Add(1)))
			for i := int32(0); pb.Next(); i++ {
				churn(b, p, tpKey{Topic: topic, Partition: i})
			}
		})
	})
}
