package watchers_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/internal/watchers"
)

// levelOp completes when the key's level has reached its own; it counts
// how often it was tried.
type levelOp struct {
	optest.Op
	level int64
	cur   *int64
	tries int
}

func (o *levelOp) TryComplete() bool {
	o.tries++
	if *o.cur >= o.level {
		return o.ForceComplete()
	}
	return false
}

// The levelled lists against a reference: random levels (in and out of
// order), checks up to a rising level, plain checks, and completions from
// outside. A check up to L tries exactly the live operations at levels up
// to L, lowest first, and each completion of a due operation costs one
// TryComplete.
func TestLevelsModel(t *testing.T) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 1))
		w := watchers.New[string](1)
		var cur int64
		var ops []*levelOp
		for step := range 1500 {
			switch k := r.IntN(10); {
			case k < 5: // park at a level around the current one
				o := &levelOp{level: cur + int64(r.IntN(50)) - 5, cur: &cur}
				o.Init(o, time.Hour)
				if r.IntN(4) == 0 {
					o.level = cur + 100 + int64(r.IntN(1000)) // far ahead
				}
				h := park(o, 1)
				w.Watch(h, []string{"k"}, []int64{o.level}, nil)
				ops = append(ops, o)
			case k < 8: // the level rises; check up to it
				cur += int64(r.IntN(20))
				var due []*levelOp
				for _, o := range ops {
					if !o.IsCompleted() && o.level <= cur {
						due = append(due, o)
					}
				}
				before := make(map[*levelOp]int, len(ops))
				for _, o := range ops {
					before[o] = o.tries
				}
				require.Equal(t, len(due), w.CheckUpTo("k", cur), "step %d", step)
				for _, o := range ops {
					want := before[o]
					if slices.Contains(due, o) {
						want++ // a due operation is tried once
					}
					if o.tries != want {
						t.Fatalf("step %d: level %d (now %d) tried %d times, want %d", step, o.level, cur, o.tries-before[o], want-before[o])
					}
				}
			case k == 8: // complete one from outside: a tombstone
				if len(ops) > 0 {
					ops[r.IntN(len(ops))].ForceComplete()
				}
			default:
				if r.IntN(5) == 0 { // a plain check tries every live one
					live := 0
					for _, o := range ops {
						if !o.IsCompleted() {
							live++
						}
					}
					done := w.Check("k")
					require.LessOrEqual(t, done, live)
				}
			}
			live := 0
			for _, o := range ops {
				if !o.IsCompleted() {
					live++
				}
			}
			var got []*lifecycle.Op
			w.Each(func(o *lifecycle.Op) { got = append(got, o) })
			require.Len(t, got, live, "step %d: live operations on the list", step)
			require.GreaterOrEqual(t, w.Watched(), live)
		}
		// Everything due completes; the key goes once empty.
		cur = 1 << 40
		w.CheckUpTo("k", cur)
		require.LessOrEqual(t, w.Keys(), 1, "empty, idle")
		require.Equal(t, 0, w.Watched())
	}
}

// Entries that arrive out of order are tried in level order.
func TestLevelsInOrder(t *testing.T) {
	w := watchers.New[string](1)
	var cur int64
	var order []int64
	levels := []int64{50, 10, 30, 10, 70, 20, 60, 40}
	for _, lv := range levels {
		o := &orderOp{levelOp: levelOp{level: lv, cur: &cur}, seen: &order}
		o.Init(o, time.Hour)
		w.Watch(park(o, 1), []string{"k"}, []int64{lv}, nil)
	}
	cur = 45
	require.Equal(t, 5, w.CheckUpTo("k", 45))
	cur = 100
	require.Equal(t, 3, w.CheckUpTo("k", 100))
	want := slices.Clone(levels)
	slices.Sort(want)
	require.Equal(t, want, order)
}

type orderOp struct {
	levelOp
	seen *[]int64
}

func (o *orderOp) TryComplete() bool {
	*o.seen = append(*o.seen, o.level)
	return o.levelOp.TryComplete()
}
