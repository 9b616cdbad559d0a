package watchers_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/internal/watchers"
	"github.com/purgatory-go/purgatory/operation"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type op = optest.Op

func newOp() *op { return optest.New(time.Hour) }

var tracker lifecycle.Tracker

// park parks o as the purgatory does, counting its watches.
func park(o lifecycle.Sealed, keys int) *lifecycle.Handle {
	lo := lifecycle.Of(o)
	h, ok := parkCounted(lo, &tracker, 0, keys, false)
	if !ok {
		panic("not parked")
	}
	return h
}

// watch parks o and watches it on keys.
func watch(w *watchers.Watchers[string], o *op, keys ...string) {
	w.Watch(park(o, len(keys)), keys, nil, nil)
}

func TestWatchCheckCancelPurge(t *testing.T) {
	w := watchers.New[string](4)
	a, b := newOp(), newOp()
	watch(w, a, "x", "y")
	watch(w, b, "x")
	assert.Equal(t, 3, w.Watched())
	assert.Equal(t, 2, w.Keys())
	assert.Equal(t, 0, w.Check("x"))
	a.Ready.Store(true)
	assert.Equal(t, 1, w.Check("x"))
	assert.Equal(t, 2, w.Watched(), "x dropped a's entry; y keeps a tombstone")
	assert.Equal(t, 2, w.Keys())
	assert.Equal(t, 1, w.Purge())
	assert.Equal(t, 2, w.Keys(), "the emptied y stays, idle, until pushed out of its shard's ring")
	assert.Equal(t, []*lifecycle.Op{lifecycle.Of(b)}, w.Remove("x"))
	assert.Nil(t, w.Remove("x"))
	assert.Equal(t, 0, w.Watched())
	assert.Equal(t, 1, w.Keys(), "y, idle")
	assert.Equal(t, 0, w.Purge())
}

// Regression: removing an emptied key must not race a Watch on the same
// key. Goroutines watch and complete operations on one key at once; every
// operation left uncompleted must still be found by a check.
func TestRemoveEmptyKeyRacingWatch(t *testing.T) {
	w := watchers.New[string](1)
	const goroutines, perG = 4, 2000
	var wg sync.WaitGroup
	kept := make([][]*op, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				o := newOp()
				watch(w, o, "k")
				if i%2 == 0 {
					o.ForceComplete() // empties the list now and then
				} else {
					kept[g] = append(kept[g], o)
				}
			}
		}()
	}
	wg.Wait()
	for _, os := range kept {
		for _, o := range os {
			o.Ready.Store(true)
		}
	}
	assert.Equal(t, goroutines*perG/2, w.Check("k"), "no operation was lost with a removed list")
	w.Purge()
	assert.LessOrEqual(t, w.Keys(), 1)
	assert.Equal(t, 0, w.Watched())
}

// A callback may use the same Watchers: no shard lock is held while
// TryComplete, OnComplete or OnExpiration run.
func TestCallbacksMayReenter(t *testing.T) {
	w := watchers.New[string](1)
	inner := newOp()
	watch(w, inner, "k")
	outer := &reentrant{w: w, inner: inner}
	outer.Init(outer, time.Hour)
	w.Watch(park(outer, 1), []string{"k"}, nil, nil)
	done := make(chan int)
	go func() { done <- w.Check("k") }()
	select {
	case n := <-done:
		assert.GreaterOrEqual(t, n, 1)
	case <-time.After(30 * time.Second):
		t.Fatal("deadlock")
	}
	require.True(t, inner.IsCompleted())
}

type reentrant struct {
	operation.Base
	w     *watchers.Watchers[string]
	inner *op
}

func (r *reentrant) TryComplete() bool {
	r.w.Watched()
	return r.ForceComplete()
}
func (r *reentrant) OnComplete() {
	r.inner.Ready.Store(true)
	r.w.Check("k")
	watch(r.w, newOp(), "other")
}
func (r *reentrant) OnExpiration() {}

// Compaction keeps the order of live entries across chunks and frees
// emptied chunks; it is checked against a plain slice.
func TestCompactionAcrossChunks(t *testing.T) {
	w := watchers.New[string](1)
	var ops []*op
	for range 3000 {
		o := newOp()
		watch(w, o, "k")
		ops = append(ops, o)
	}
	var want []*lifecycle.Op
	for i, o := range ops {
		if i%3 == 0 || (i > 1000 && i < 2500) {
			o.ForceComplete()
		} else {
			want = append(want, lifecycle.Of(o))
		}
	}
	assert.Equal(t, len(ops)-len(want), w.Purge())
	assert.Equal(t, len(want), w.Watched())
	var got []*lifecycle.Op
	w.Each(func(b *lifecycle.Op) { got = append(got, b) })
	assert.ElementsMatch(t, want, got)
	for _, o := range ops {
		o.Ready.Store(true)
	}
	assert.Equal(t, len(want), w.Check("k"))
	assert.Equal(t, 0, w.Watched())
	assert.Equal(t, 0, w.Purge())
	assert.LessOrEqual(t, w.Keys(), 1)
}

// Compaction leaves no handle behind in a list's arrays: every handle that
// was dropped becomes unreachable.
func TestCompactionDropsReferences(t *testing.T) {
	w := watchers.New[string](1)
	var weakHandles []weak.Pointer[lifecycle.Handle]
	var ops []*op
	for i := range 600 {
		o := newOp()
		h := park(o, 1)
		w.Watch(h, []string{"k"}, nil, nil)
		if i%2 == 0 {
			weakHandles = append(weakHandles, weak.Make(h))
			o.ForceComplete()
		} else {
			ops = append(ops, o)
		}
	}
	assert.Equal(t, 300, w.Purge())
	require.Eventually(t, func() bool {
		runtime.GC()
		for _, wp := range weakHandles {
			if wp.Value() != nil {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "a dropped handle is still referenced")
	assert.Equal(t, 300, w.Watched())
	runtime.KeepAlive(ops)
}

// Keys whose lists a check empties are removed, but for the few most
// recent of each shard (kept for a hot key's next request): one-shot keys
// (a member id, a request id) cost nothing once their operations are
// gone, with no purge, however many were used.
func TestCheckRemovesEmptiedKeys(t *testing.T) {
	const shards, idlePerShard = 8, 8
	w := watchers.New[string](shards)
	for _, n := range []int{1000, 20_000} {
		for i := range n {
			o := newOp()
			k := fmt.Sprintf("member-%d-%d", n, i)
			watch(w, o, k)
			o.Ready.Store(true)
			require.Equal(t, 1, w.Check(k))
		}
		assert.LessOrEqual(t, w.Keys(), shards*idlePerShard, "after %d one-shot keys", n)
		assert.Equal(t, 0, w.Watched())
	}
}

// A list that sits in the ring of idle lists, then is removed by Remove
// (CancelForKey) and its key watched again, must not take the new list
// with it when it is pushed out of the ring.
func TestIdleRingSparesANewListOfTheSameKey(t *testing.T) {
	w := watchers.New[string](1)
	old := newOp()
	watch(w, old, "a")
	old.Ready.Store(true)
	require.Equal(t, 1, w.Check("a")) // "a" is empty, idle
	assert.Nil(t, w.Remove("a"))
	live := newOp()
	watch(w, live, "a")
	for i := range 20 { // push the old list out of the ring
		o := newOp()
		k := fmt.Sprint("other-", i)
		watch(w, o, k)
		o.Ready.Store(true)
		require.Equal(t, 1, w.Check(k))
	}
	live.Ready.Store(true)
	assert.Equal(t, 1, w.Check("a"), "the new list of a is still there")
}

// watchingOp, when tried, completes and watches next on the same key: a
// Watch that lands after the check took the key's entries and before it
// drops the ones it completed.
type watchingOp struct {
	optest.Op
	w     *watchers.Watchers[string]
	next  *op
	level int64 // with levels: watch next at this level
	upTo  bool
}

func (o *watchingOp) TryComplete() bool {
	h := park(o.next, 1)
	if o.upTo {
		o.w.Watch(h, []string{"k"}, []int64{o.level}, nil)
	} else {
		o.w.Watch(h, []string{"k"}, nil, nil)
	}
	return o.ForceComplete()
}

// The second pass of a check drops only what the check completed: an
// operation watched on the key while the check was trying the others stays.
func TestWatchDuringCheckSurvives(t *testing.T) {
	for _, upTo := range []bool{false, true} {
		w := watchers.New[string](1)
		next := newOp()
		o := &watchingOp{w: w, next: next, level: 5, upTo: upTo}
		o.Init(o, time.Hour)
		if upTo {
			w.Watch(park(o, 1), []string{"k"}, []int64{5}, nil)
			require.Equal(t, 1, w.CheckUpTo("k", 5))
		} else {
			w.Watch(park(o, 1), []string{"k"}, nil, nil)
			require.Equal(t, 1, w.Check("k"))
		}
		assert.Equal(t, 1, w.Watched(), "upTo=%v: only the completed entry went", upTo)
		next.Ready.Store(true)
		if upTo {
			assert.Equal(t, 1, w.CheckUpTo("k", 5), "the operation watched meanwhile is found")
		} else {
			assert.Equal(t, 1, w.Check("k"), "the operation watched meanwhile is found")
		}
	}
}

// A Watch reports a check that may have missed the operation: one that
// looked up one of its keys (watched on it or not, in the same shard)
// after Mark; it reports none when no check ran, and always one without
// marks or for more keys than Marks follows.
func TestWatchReportsChecksSinceMark(t *testing.T) {
	keys := []string{"x", "y"}
	for _, c := range []struct {
		name   string
		shards int
		check  string // a key checked between Mark and Watch, or ""
		missed bool
	}{
		{"no check", 512, "", false},
		{"a check of a key it is watched on", 512, "y", true},
		{"a check of a key of the same shard", 1, "z", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := watchers.New[string](c.shards)
			o := newOp()
			h := park(o, len(keys))
			var m watchers.Marks
			w.Mark(keys, &m)
			if c.check != "" {
				assert.Equal(t, 0, w.Check(c.check))
			}
			assert.Equal(t, c.missed, w.Watch(h, keys, nil, &m))
			assert.Equal(t, 2, w.Watched())
		})
	}

	w := watchers.New[string](512)
	assert.True(t, w.Watch(park(newOp(), 1), []string{"x"}, nil, nil), "without marks")
	many := make([]string, 9)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	var m watchers.Marks
	w.Mark(many, &m)
	assert.True(t, w.Watch(park(newOp(), len(many)), many, nil, &m), "more keys than Marks follows")
}

// parkCounted parks o and, if that succeeds, counts it as pending, as a
// purgatory's park does once the timeout is in its timer.
func parkCounted(o *lifecycle.Op, t *lifecycle.Tracker, now int64, watches int, deferred bool) (*lifecycle.Handle, bool) {
	if r := lifecycle.Park(o, t, now, watches, deferred); r != lifecycle.Accepted {
		return nil, false
	}
	h, _ := lifecycle.AddTimeout(o, t.Core, nil)
	lifecycle.Arrived(o, t, watches)
	return h, true
}
