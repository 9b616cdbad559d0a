package purgatory_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/purgatory"
)

// The model test drives a purgatory on a MockTimer with random steps and
// checks it, after every step, against a reference that is just a slice
// of records: which keys each operation watches, its deadline, whether it
// is completable, and how it ended.

type modelOp struct {
	op          *mockOp
	keys        []string
	deadline    time.Duration
	completable bool
	ended       string // "", "early", "expired"
	delayed     bool   // counted in NumDelayed
}

type purgatoryModel struct {
	t   *testing.T
	p   *pg
	now func() time.Duration
	adv func(time.Duration)
	ops []*modelOp
}

func (m *purgatoryModel) pending() []*modelOp {
	var out []*modelOp
	for _, o := range m.ops {
		if o.ended == "" {
			out = append(out, o)
		}
	}
	return out
}

func (m *purgatoryModel) step(r *rand.Rand) {
	t := m.t
	switch k := r.IntN(10); {
	case k < 3: // park a new operation
		o := &modelOp{delayed: true}
		timeout := time.Duration(r.IntN(60)-5) * time.Millisecond
		o.op = newOp(timeout)
		o.deadline = m.now() + timeout
		for _, i := range r.Perm(8)[:1+r.IntN(3)] {
			o.keys = append(o.keys, fmt.Sprintf("k%d", i))
		}
		o.completable = r.IntN(10) == 0
		o.op.Ready.Store(o.completable)
		m.ops = append(m.ops, o)
		done, err := m.p.TryCompleteElseWatch(o.op, o.keys...)
		require.NoError(t, err)
		switch {
		case o.completable:
			require.True(t, done)
			o.ended, o.delayed = "early", false
		case timeout <= 0: // a MockTimer runs a due task within Add
			require.False(t, done)
			o.ended, o.delayed = "expired", false
		default:
			require.False(t, done)
		}
	case k < 5: // mark one completable without checking
		if ps := m.pending(); len(ps) > 0 {
			o := ps[r.IntN(len(ps))]
			o.completable = true
			o.op.Ready.Store(true)
		}
	case k < 7: // check a key
		key := fmt.Sprintf("k%d", r.IntN(8))
		want := 0
		for _, o := range m.pending() {
			if o.completable && slices.Contains(o.keys, key) {
				o.ended, o.delayed = "early", false
				want++
			}
		}
		require.Equal(t, want, m.p.CheckAndComplete(key), "CheckAndComplete(%s)", key)
	case k == 7: // force-complete one directly
		if len(m.ops) > 0 {
			o := m.ops[r.IntN(len(m.ops))]
			require.Equal(t, o.ended == "", o.op.ForceComplete())
			if o.ended == "" {
				o.ended, o.delayed = "early", false
			}
		}
	case k == 8: // cancel a key
		key := fmt.Sprintf("k%d", r.IntN(8))
		var want []*mockOp
		for _, o := range m.pending() {
			if i := slices.Index(o.keys, key); i >= 0 {
				o.keys = slices.Delete(o.keys, i, i+1)
				o.delayed = false
				o.deadline = 1 << 62 // its timeout is cancelled
				want = append(want, o.op)
			}
		}
		got := m.p.CancelForKey(key)
		require.ElementsMatch(t, want, got)
	default: // advance the clock
		m.adv(time.Duration(r.IntN(20)) * time.Millisecond)
		for _, o := range m.pending() {
			if o.deadline <= m.now() {
				o.ended, o.delayed = "expired", false
			}
		}
	}
	m.check()
}

func (m *purgatoryModel) check() {
	t := m.t
	delayed, watched := 0, 0
	for i, o := range m.ops {
		switch o.ended {
		case "":
			require.False(t, o.op.IsCompleted(), "op %d completed too soon", i)
			watched += len(o.keys)
		case "early":
			require.Equal(t, int32(1), o.op.Completes.Load(), "op %d", i)
			require.Equal(t, int32(0), o.op.Expiries.Load(), "op %d", i)
		case "expired":
			require.Equal(t, int32(1), o.op.Completes.Load(), "op %d", i)
			require.Equal(t, int32(1), o.op.Expiries.Load(), "op %d", i)
		}
		if o.delayed {
			delayed++
		}
	}
	require.Equal(t, delayed, m.p.NumDelayed(), "NumDelayed")
	require.Equal(t, watched, m.p.Watched(), "Watched counts live entries exactly")
}

// sweep checks every key, which completes whatever is completable, and
// then only live entries may be left: tombstones go when a key is checked.
func (m *purgatoryModel) sweep() {
	for _, o := range m.pending() {
		if o.completable && len(o.keys) > 0 {
			o.ended, o.delayed = "early", false
		}
	}
	for i := range 8 {
		m.p.CheckAndComplete(fmt.Sprintf("k%d", i))
	}
	m.check()
	watched := 0
	for _, o := range m.pending() {
		watched += len(o.keys)
	}
	require.Equal(m.t, watched, m.p.Watched(), "Watched after every key was checked")
}

func TestPurgatoryModel(t *testing.T) {
	for seed := range uint64(8) {
		p, mt := newMockPurgatory(t, withSmallShards()...)
		m := &purgatoryModel{t: t, p: p, now: mt.Now, adv: func(d time.Duration) { mt.Advance(d) }}
		r := rand.New(rand.NewPCG(seed, 77))
		for i := range 1500 {
			m.step(r)
			if i%100 == 99 {
				m.sweep()
			}
		}
	}
}

// withSmallShards puts keys on few shards, so that lists share
// shards as they would under load.
func withSmallShards() []purgatory.Option {
	return []purgatory.Option{purgatory.WithShards(2)}
}
