package watchers_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/watchers"
)

// queued parks n operations on key, in order.
func queued(w *watchers.Watchers[string], key string, n int) []*op {
	ops := make([]*op, n)
	for i := range ops {
		ops[i] = newOp()
		watch(w, ops[i], key)
	}
	return ops
}

// tries sums the TryComplete calls of ops.
func tries(ops []*op) int {
	n := 0
	for _, o := range ops {
		n += int(o.Tries.Load())
	}
	return n
}

// live counts the operations of ops that have not completed.
func live(ops []*op) int {
	n := 0
	for _, o := range ops {
		if !o.IsCompleted() {
			n++
		}
	}
	return n
}

func TestCheckNOldestFirst(t *testing.T) {
	w := watchers.New[string](1)
	ops := queued(w, "k", 10)
	for _, o := range ops {
		o.Ready.Store(true)
	}
	assert.Equal(t, 0, w.CheckN("k", 0), "n < 1 completes nothing")
	assert.Equal(t, 0, w.CheckN("k", -1))
	assert.Equal(t, 0, tries(ops), "and tries nothing")

	assert.Equal(t, 3, w.CheckN("k", 3))
	for i, o := range ops {
		assert.Equal(t, i < 3, o.IsCompleted(), "op %d", i)
	}
	assert.Equal(t, 3, tries(ops), "the three oldest, and no other, were tried")
	assert.Equal(t, 7, w.Watched(), "their entries were popped")
	assert.Equal(t, 1, w.CheckN("k", 1))
	assert.True(t, ops[3].IsCompleted())
	assert.Equal(t, 6, w.Check("k"), "Check completes the rest")
	assert.Equal(t, 0, w.Watched())
}

// A CheckN tries what it must to complete n, however many wait behind:
// the oldest first, and nothing past the one that completes.
func TestCheckNTriesOnlyWhatItNeeds(t *testing.T) {
	w := watchers.New[string](1)
	ops := queued(w, "k", 1000)
	ops[0].Ready.Store(true)
	require.Equal(t, 1, w.CheckN("k", 1))
	assert.Equal(t, 1, tries(ops))

	ops[200].Ready.Store(true)
	require.Equal(t, 1, w.CheckN("k", 1))
	assert.True(t, ops[200].IsCompleted())
	assert.Equal(t, 1+200, tries(ops), "ops 1-200 tried once each, past several windows")

	ops[100].Ready.Store(true)
	ops[900].Ready.Store(true)
	assert.Equal(t, 2, w.CheckN("k", 5), "fewer than n can complete: every one is tried")
	assert.Equal(t, 1+200+998, tries(ops))
	assert.Equal(t, 996, live(ops))
	// A CheckN pops the tombstones at the head, and moves no other entry:
	// those behind live ones go at the next full check or purge.
	assert.Equal(t, 999, w.Watched())
	assert.Equal(t, 3, w.Purge())
	assert.Equal(t, 996, w.Watched())
}

// CheckN tries the plain entries, in park order, before those at a level,
// lowest level first; Check tries them in the same order.
func TestCheckNLevelledAfterPlain(t *testing.T) {
	for _, full := range []bool{false, true} {
		w := watchers.New[string](1)
		var order []string
		mk := func(name string) *namedOp {
			o := &namedOp{name: name, order: &order}
			o.Init(o, time.Hour)
			return o
		}
		w.Watch(park(mk("L9"), 1), []string{"k"}, []int64{9}, nil)
		w.Watch(park(mk("p1"), 1), []string{"k"}, nil, nil)
		w.Watch(park(mk("L3"), 1), []string{"k"}, []int64{3}, nil)
		w.Watch(park(mk("p2"), 1), []string{"k"}, nil, nil)
		if full {
			assert.Equal(t, 4, w.Check("k"))
		} else {
			assert.Equal(t, 3, w.CheckN("k", 3))
			assert.Equal(t, 1, w.CheckN("k", 3))
		}
		assert.Equal(t, []string{"p1", "p2", "L3", "L9"}, order, "full=%v", full)
		assert.Equal(t, 0, w.Watched())
	}
}

// namedOp completes at once, and writes its name down when tried.
type namedOp struct {
	op
	name  string
	order *[]string
}

func (o *namedOp) TryComplete() bool {
	*o.order = append(*o.order, o.name)
	return o.ForceComplete()
}

// A check walks a long list a window at a time: every live operation is
// tried once, and only the ready ones complete.
func TestCheckWalksEveryWindow(t *testing.T) {
	w := watchers.New[string](1)
	ops := queued(w, "k", 1000)
	// Tombstones before, among and after the ready ones.
	for i := 0; i < len(ops); i += 7 {
		ops[i].ForceComplete()
	}
	want := 0
	for i := 1; i < len(ops); i += 3 {
		if !ops[i].IsCompleted() {
			ops[i].Ready.Store(true)
			want++
		}
	}
	before := live(ops)
	assert.Equal(t, want, w.Check("k"))
	for _, o := range ops {
		assert.LessOrEqual(t, o.Tries.Load(), int32(1))
	}
	assert.Equal(t, before-want, live(ops))
	assert.Equal(t, live(ops), w.Watched(), "the full check compacted the list")
}

// hookOp runs its hook, once, the first time it is tried, and then
// declines: the competitor acts between two windows of a walk.
type hookOp struct {
	op
	hook func()
}

func (o *hookOp) TryComplete() bool {
	if h := o.hook; h != nil {
		o.hook = nil
		h()
	}
	return o.op.TryComplete()
}

// walkSeam parks 200 operations on "k" in a one-shard Watchers, the 100th
// of which runs competitor when tried, and makes every fifth ready. It
// then runs check, and returns the operations with how many the check
// completed.
func walkSeam(t *testing.T, check func(w *watchers.Watchers[string]) int, competitor func(w *watchers.Watchers[string], ops []*op)) (*watchers.Watchers[string], []*op, int) {
	t.Helper()
	w := watchers.New[string](1)
	ops := make([]*op, 200)
	var hooked *hookOp
	for i := range ops {
		if i == 100 {
			hooked = &hookOp{}
			hooked.Init(hooked, time.Hour)
			ops[i] = &hooked.op
			w.Watch(park(hooked, 1), []string{"k"}, nil, nil)
			continue
		}
		ops[i] = newOp()
		watch(w, ops[i], "k")
	}
	for i := 0; i < len(ops); i += 5 {
		if i != 100 {
			ops[i].Ready.Store(true)
		}
	}
	hooked.hook = func() { competitor(w, ops) }
	return w, ops, check(w)
}

// The seams of a walk: each competitor runs while the walk is between two
// windows, with the list pinned, and the list must come out whole: no
// live operation lost, no tombstone counted twice, no list reused while
// the walk holds it. Of the 39 ready operations, 20 come before the one
// that runs the competitor.
func TestWalkSeams(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int // the most the walk completes
		check func(w *watchers.Watchers[string]) int
	}{
		{"Check", 39, func(w *watchers.Watchers[string]) int { return w.Check("k") }},
		{"CheckN", 30, func(w *watchers.Watchers[string]) int { return w.CheckN("k", 30) }},
	} {
		// settled checks that, once every ready operation has been
		// completed by a full check and the tombstones purged, the counts
		// agree with the operations.
		settled := func(t *testing.T, w *watchers.Watchers[string], ops []*op) {
			t.Helper()
			w.Check("k")
			w.Purge()
			for i, o := range ops {
				if o.Ready.Load() {
					assert.True(t, o.IsCompleted(), "ready op %d", i)
				}
			}
			assert.Equal(t, live(ops), w.Watched())
		}
		t.Run(c.name+"/purge", func(t *testing.T) {
			w, ops, done := walkSeam(t, c.check, func(w *watchers.Watchers[string], ops []*op) {
				ops[150].ForceComplete() // a ready one, ahead of the walk
				assert.Equal(t, 0, w.Purge(), "a pinned list is left to the next round")
			})
			assert.Equal(t, min(c.n, 38), done)
			settled(t, w, ops)
		})
		t.Run(c.name+"/tombstones", func(t *testing.T) {
			w, ops, done := walkSeam(t, c.check, func(w *watchers.Watchers[string], ops []*op) {
				// Ahead of the walk, behind it, and at the head.
				for _, i := range []int{101, 102, 199, 1, 2, 3} {
					ops[i].ForceComplete()
				}
			})
			assert.Equal(t, c.n, done)
			settled(t, w, ops)
		})
		t.Run(c.name+"/nested check", func(t *testing.T) {
			nested := 0
			w, ops, done := walkSeam(t, c.check, func(w *watchers.Watchers[string], ops []*op) {
				ops[161].Ready.Store(true)
				ops[181].Ready.Store(true)
				nested = w.Check("k")
			})
			assert.Equal(t, 19+2, nested, "the nested walk completes every ready one left")
			assert.Equal(t, 20, done, "the outer walk finds them completed")
			settled(t, w, ops)
		})
		t.Run(c.name+"/watch", func(t *testing.T) {
			var late []*op
			w, ops, done := walkSeam(t, c.check, func(w *watchers.Watchers[string], ops []*op) {
				late = queued(w, "k", 100)
				for _, o := range late {
					o.Ready.Store(true)
				}
			})
			assert.Equal(t, c.n, done, "operations watched after the walk began are not its")
			assert.Equal(t, 0, tries(late))
			assert.Equal(t, 100+39-c.n, w.Check("k"), "the next check finds them")
			settled(t, w, ops)
		})
		t.Run(c.name+"/remove", func(t *testing.T) {
			var removed []*lifecycle.Op
			livenow := 0
			w, _, done := walkSeam(t, c.check, func(w *watchers.Watchers[string], ops []*op) {
				removed = w.Remove("k")
				livenow = live(ops)
			})
			assert.Equal(t, livenow, len(removed), "Remove returned every live operation")
			assert.GreaterOrEqual(t, done, 20, "the window under way is tried")
			assert.Less(t, done, c.n, "and then the walk stops")
			assert.Equal(t, 0, w.Watched())
			assert.Equal(t, 0, w.Keys())
		})
		t.Run(c.name+"/emptied and pushed out", func(t *testing.T) {
			w, ops, _ := walkSeam(t, c.check, func(w *watchers.Watchers[string], ops []*op) {
				for _, o := range ops {
					o.ForceComplete()
				}
				w.Check("k") // empties "k": it joins the ring of idle lists
				// Keys of the same shard push it out of the ring: it is
				// removed, and must not be reused while the walk holds it.
				for i := range 20 {
					k := fmt.Sprintf("churn%d", i)
					o := newOp()
					watch(w, o, k)
					o.Ready.Store(true)
					require.Equal(t, 1, w.Check(k))
				}
				assert.Equal(t, 0, w.Check("k"))
			})
			z := newOp()
			watch(w, z, "z")
			z.Ready.Store(true)
			assert.Equal(t, 1, w.Check("z"), "a new key has a list of its own")
			assert.Equal(t, 0, live(ops))
			assert.Equal(t, 0, w.Watched())
		})
	}
}

// Neither a full check nor a CheckN allocates, however many watch the key.
func TestCheckAllocatesNothing(t *testing.T) {
	for _, n := range []int{1, 100, 4096, 10000} {
		w := watchers.New[string](1)
		queued(w, "k", n)
		w.Check("k") // the list's first check
		assert.Zero(t, testing.AllocsPerRun(20, func() { w.Check("k") }), "Check, %d watching", n)
		assert.Zero(t, testing.AllocsPerRun(20, func() { w.CheckN("k", 1) }), "CheckN, %d watching", n)
	}
}

// Walks of one hot key race parks, completions, purges and removals of
// it. At rest every ready operation has completed, and the lists hold
// the operations still waiting, and nothing else.
func TestWalkStorm(t *testing.T) {
	w := watchers.New[string](1)
	const workers, rounds = 4, 400
	var mu sync.Mutex
	var all []*op
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				switch (g + i) % 6 {
				case 0, 1:
					ops := queued(w, "k", 20)
					for j, o := range ops {
						if j%3 == 0 {
							o.Ready.Store(true)
						}
						if j%7 == 0 {
							o.ForceComplete()
						}
					}
					mu.Lock()
					all = append(all, ops...)
					mu.Unlock()
				case 2:
					w.CheckN("k", 1+i%5)
				case 3:
					w.Check("k")
				case 4:
					w.Purge()
				case 5:
					if i%40 == 5 {
						for _, o := range w.Remove("k") {
							// Cancelled operations are out of their lists.
							lifecycle.Cancel(o)
						}
					} else {
						w.CheckN("k", 3)
					}
				}
			}
		}()
	}
	wg.Wait()
	w.Check("k")
	w.Purge()
	waiting := 0
	for _, o := range all {
		cancelled := lifecycle.IsCancelled(lifecycle.Of(o))
		if o.Ready.Load() && !cancelled {
			assert.True(t, o.IsCompleted())
		}
		if !o.IsCompleted() && !cancelled {
			waiting++
		}
	}
	assert.Equal(t, waiting, w.Watched(), "the lists hold the waiting operations, and nothing else")
}
