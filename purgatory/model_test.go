package purgatory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/operation"
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
	cancelCtx   context.CancelFunc // nil: no context
	// ended is "" while pending; then "early", "expired", "context" or
	// "shutdown", each counted in its Stats field; "cancelled" (taken out
	// by CancelForKey, counted in Cancelled); "cancelled-forced" (then
	// completed by ForceComplete: OnComplete ran, nothing more counted).
	ended   string
	delayed bool // counted in NumDelayed
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
		if r.IntN(4) == 0 {
			ctx, cancel := context.WithCancel(context.Background())
			o.cancelCtx = cancel
			o.op = newOp(timeout, operation.WithContext(ctx))
		} else {
			o.op = newOp(timeout)
		}
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
		default:
			// A timeout of zero or less is due at once: the next
			// Advance, Advance(0) included, expires it.
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
	case k == 7 && r.IntN(2) == 0: // force-complete one directly
		if len(m.ops) > 0 {
			o := m.ops[r.IntN(len(m.ops))]
			want := o.ended == "" || o.ended == "cancelled"
			require.Equal(t, want, o.op.ForceComplete())
			switch o.ended {
			case "":
				o.ended, o.delayed = "early", false
			case "cancelled":
				o.ended = "cancelled-forced"
			}
		}
	case k == 7: // end one operation's context
		var withCtx []*modelOp
		for _, o := range m.ops {
			if o.cancelCtx != nil {
				withCtx = append(withCtx, o)
			}
		}
		if len(withCtx) > 0 {
			o := withCtx[r.IntN(len(withCtx))]
			o.cancelCtx()
			if o.ended == "" {
				o.ended, o.delayed = "context", false
				// The context's AfterFunc completes it on a goroutine of its own.
				waitFor(t, func() bool { return o.op.Completes.Load() == 1 })
			}
		}
	case k == 8: // cancel a key
		key := fmt.Sprintf("k%d", r.IntN(8))
		var want []*mockOp
		for _, o := range m.pending() {
			if slices.Contains(o.keys, key) {
				o.ended, o.delayed = "cancelled", false
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
	var want purgatory.Stats
	for i, o := range m.ops {
		// Plain comparisons: this runs for every operation at every step,
		// and testify's helpers walk the stack on each call.
		completes, expiries := int32(1), int32(0)
		var cause error
		switch o.ended {
		case "":
			if o.op.IsCompleted() {
				t.Fatalf("op %d completed too soon", i)
			}
			watched += len(o.keys)
			completes = 0
		case "early":
			want.CompletedEarly++
		case "expired":
			want.Expired++
			expiries, cause = 1, operation.ErrExpired
		case "shutdown":
			want.Shutdown++
			expiries, cause = 1, purgatory.ErrShutdown
		case "context":
			want.ContextDone++
			cause = context.Canceled
		case "cancelled":
			want.Cancelled++
			completes = 0
			if !o.op.IsCancelled() {
				t.Fatalf("op %d: not cancelled", i)
			}
		case "cancelled-forced":
			want.Cancelled++
		}
		if got := o.op.Cause(); got != cause {
			t.Fatalf("op %d (%s): Cause() = %v, want %v", i, o.ended, got, cause)
		}
		if got := o.op.Completes.Load(); got != completes {
			t.Fatalf("op %d (%s): OnComplete ran %d times, want %d", i, o.ended, got, completes)
		}
		if got := o.op.Expiries.Load(); got != expiries {
			t.Fatalf("op %d (%s): OnExpiration ran %d times, want %d", i, o.ended, got, expiries)
		}
		if o.delayed {
			delayed++
		}
	}
	want.Pending, want.Watched = delayed, watched
	got := m.p.Stats()
	got.Purged = 0
	require.Equal(t, want, got, "Stats")
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
		// Shutdown expires what is left, and then nothing is pending,
		// watched, timed or on any list.
		for _, o := range m.pending() {
			o.ended, o.delayed = "shutdown", false
		}
		require.NoError(t, p.Shutdown(context.Background()))
		m.check()
		require.Equal(t, 0, mt.Size(), "timer entries left")
		for _, o := range m.ops {
			if o.cancelCtx != nil {
				o.cancelCtx()
			}
		}
		require.Equal(t, 0, p.Stats().Pending)
	}
}

// withSmallShards puts keys on few shards, so that lists share
// shards as they would under load.
func withSmallShards() []purgatory.Option {
	return []purgatory.Option{purgatory.WithShards(2)}
}

// waitFor polls cond until it holds, failing the test after 30 s: a bound
// no loaded machine reaches, for work another goroutine finishes at once.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		runtime.Gosched()
	}
}
