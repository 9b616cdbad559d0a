package core

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testOp is an operation's holder, as the lifecycle's Op is: an OpBase
// whose target records the expiries it is told of.
type testOp struct {
	OpBase[opTarget, *opTarget]
	id int
}

type opTarget struct {
	ran []*testOp
	at  []time.Duration
	clk Clock
}

func (x *opTarget) ExpireEntry(e *OpEntry, fired bool) {
	o := e.Owner.(*testOp)
	x.ran = append(x.ran, o)
	if x.clk != nil {
		x.at = append(x.at, x.clk.Now())
	}
}

func newTestOp(id int, d time.Duration, x *opTarget) *testOp {
	o := &testOp{id: id}
	e := EntryOfOp(&o.OpBase)
	e.Owner = o
	e.Delay = int64(d)
	SetTarget(&o.OpBase, x)
	return o
}

func (o *testOp) entry() *OpEntry { return EntryOfOp(&o.OpBase) }

// leave is an operation's completion, as the lifecycle's release: the
// entry is cancelled and lets go of its slots.
func (o *testOp) leave() bool {
	ok := o.entry().Cancel()
	o.entry().Leave()
	return ok
}

// always is a Guard that lets every reschedule through.
type always struct{}

func (always) Reschedulable() bool { return true }

// The model test of the timer, for operations' entries: adds (each entry
// once, as a park does), reschedules of pending, fired and left entries,
// leaves, and advances, mixed with tasks, whose model is the task model's.
// After each step the timer and the model agree on what ran, when, and
// how many are pending.
func TestModelOfOperations(t *testing.T) {
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, seed^0xabc))
		m := newModel(t, 2+int(seed%5))
		x := &opTarget{}
		live := map[*testOp]time.Duration{}
		fired := map[*testOp]bool{}
		var ops []*testOp
		checkRuns := func(start int) {
			now := m.clk.Now()
			for _, o := range x.ran[start:] {
				d, ok := live[o]
				require.True(t, ok, "seed %d: op %d ran but was not pending", seed, o.id)
				require.GreaterOrEqual(t, now, d, "seed %d: op %d ran early", seed, o.id)
				delete(live, o)
				fired[o] = true
			}
			for o, d := range live {
				require.Greater(t, dueAt(d), now, "seed %d: op %d due at %v still pending at %v", seed, o.id, dueAt(d), now)
			}
		}
		for range 3000 {
			arg := r.Int64N(4000)
			delay := time.Duration(arg-50) * modelTick / 4
			pick := func() *testOp { return ops[r.IntN(len(ops))] }
			switch k := r.IntN(10); {
			case k < 3 || len(ops) == 0:
				o := newTestOp(len(ops), delay, x)
				ops = append(ops, o)
				h, err := m.st.AddOp(o.entry())
				require.NoError(t, err)
				require.NotNil(t, h)
				require.Same(t, o.entry(), h.Entry(), "the first slot is the handle")
				live[o] = max(m.clk.Now()+delay, m.clk.Now())
			case k == 3:
				o := pick()
				_, pending := live[o]
				ok := m.st.Reschedule(o.entry(), delay, always{})
				require.Equal(t, pending, ok, "seed %d: a reschedule moves a pending entry only", seed)
				if ok {
					live[o] = max(m.clk.Now()+delay, m.clk.Now())
				}
			case k == 4:
				o := pick()
				_, pending := live[o]
				require.Equal(t, pending, o.leave(), "seed %d: Cancel reports whether it prevented a run", seed)
				delete(live, o)
			case k == 5: // a task, as the task model's step adds one
				p := &modelTask{id: len(m.tasks), log: &m.ran}
				m.tasks = append(m.tasks, p)
				m.add(p, delay)
			default:
				start := len(x.ran)
				m.advance(time.Duration(arg%2000) * modelTick / 10)
				checkRuns(start)
			}
			require.Equal(t, len(m.live)+len(live), m.st.Size(), "seed %d: Size", seed)
		}
		for len(live) > 0 || len(m.live) > 0 {
			start := len(x.ran)
			m.advance(time.Hour)
			checkRuns(start)
		}
		require.Zero(t, m.st.Size())
		require.NoError(t, m.st.Close())
	}
}

// An operation that leaves is unreachable from the timer at once, however
// its timeout has moved: its handle and its current slot are cleared, and
// every other slot it had was cleared when it moved.
func TestLeftOperationIsUnreachable(t *testing.T) {
	t.Parallel()
	st, clk := newInlineTimer(t, withWheelSize(4))
	x := &opTarget{}
	o := newTestOp(0, time.Hour, x)
	h, err := st.AddOp(o.entry())
	require.NoError(t, err)
	for _, d := range []time.Duration{time.Minute, 10 * time.Millisecond, 2 * time.Hour, time.Second} {
		require.True(t, st.Reschedule(o.entry(), d, always{}))
	}
	clk.Advance(500 * time.Millisecond) // moves it down a level or two
	st.runDue()
	require.Equal(t, 1, st.Size())
	wp := weak.Make(o)
	require.True(t, o.leave())
	require.Nil(t, h.Entry(), "the handle lets go")
	require.Zero(t, st.Size())
	o = nil
	require.Eventually(t, func() bool {
		runtime.GC()
		return wp.Value() == nil
	}, 10*time.Second, time.Millisecond, "the timer still holds the operation")
	runtime.KeepAlive(h)
	clk.Advance(3 * time.Hour)
	st.runDue()
	assert.Empty(t, x.ran)
}

// A reschedule of an entry that has fired (its expiry under way) changes
// nothing and reports false; one of an entry never added adds it, and
// the AddOp that comes after stands aside, its deadline the reschedule's.
func TestRescheduleFiredAndNeverAdded(t *testing.T) {
	t.Parallel()
	st, clk := newInlineTimer(t)
	x := &opTarget{clk: clk}
	fired := newTestOp(0, time.Millisecond, x)
	_, err := st.AddOp(fired.entry())
	require.NoError(t, err)
	clk.Advance(time.Millisecond)
	st.runDue()
	require.Len(t, x.ran, 1)
	assert.False(t, st.Reschedule(fired.entry(), time.Second, always{}), "fired: the expiry decides")

	fresh := newTestOp(1, time.Hour, x)
	require.True(t, st.Reschedule(fresh.entry(), 5*time.Millisecond, always{}))
	h := fresh.entry().Handle()
	require.NotNil(t, h, "the reschedule's slot is the handle")
	clk.Advance(time.Millisecond)
	got, err := st.AddOp(fresh.entry())
	require.NoError(t, err)
	assert.Same(t, h, got, "the add stands aside, and returns the handle")
	assert.Equal(t, 1, st.Size())
	clk.Advance(3 * time.Millisecond)
	st.runDue()
	assert.Len(t, x.ran, 1, "not before the reschedule's deadline")
	clk.Advance(time.Millisecond)
	st.runDue()
	require.Len(t, x.ran, 2)
	assert.Equal(t, 5*time.Millisecond+time.Millisecond, x.at[1])
}

// A slot taken out of a coarse bucket is moved down holding the entry's
// add-lock, as a linked entry is refiled. A leave that comes while the
// mover holds the lock, before it publishes the new slot, leaves nothing
// behind: the new slot does not become the handle, and the mover sees
// the entry cancelled as it lets go, and clears the slot it published.
func TestLeaveWhileMovingDown(t *testing.T) {
	t.Parallel()
	st, clk := newInlineTimer(t, withWheelSize(4))
	x := &opTarget{}
	o := newTestOp(0, 100*time.Millisecond, x)
	h, err := st.AddOp(o.entry())
	require.NoError(t, err)
	e := o.entry()
	e.HoldAdd() // the mover's lock, as TryLockAdd takes it
	require.True(t, o.leave(), "a Cancel while the lock is held swaps the state only")
	assert.Nil(t, h.Entry())
	ns := st.wheel.addSlot(e, st.tickOf(e.Expire))
	require.NotNil(t, ns)
	e.publish(ns)
	assert.Nil(t, e.Handle(), "a left entry's new slot is not its handle")
	e.UnlockAdd()
	assert.Nil(t, ns.Entry(), "the mover cleared the slot it published")
	assert.Nil(t, e.cur.Load())
	assert.Zero(t, st.Size())
	clk.Advance(time.Second)
	st.runDue()
	assert.Empty(t, x.ran)
}

// Close cancels the operations' entries it holds, as it does tasks.
func TestCloseCancelsOperations(t *testing.T) {
	t.Parallel()
	st, _ := newInlineTimer(t)
	x := &opTarget{}
	var ops []*testOp
	for i, d := range []time.Duration{0, time.Millisecond, time.Second, time.Hour} {
		o := newTestOp(i, d, x)
		_, err := st.AddOp(o.entry())
		require.NoError(t, err)
		ops = append(ops, o)
	}
	require.Equal(t, 4, st.Size())
	require.NoError(t, st.Close())
	for _, o := range ops {
		assert.True(t, o.entry().IsCancelled())
	}
	_, err := st.AddOp(newTestOp(9, 0, x).entry())
	assert.ErrorIs(t, err, ErrClosed)
}

// A far bucket whose operations complete early keeps what its pending
// operations need, not a slot for every operation parked since it was
// last due: a stripe drops the chunks whose every slot is clear as it
// grows. 100,000 timeouts 30 s away, 99% of them left at once, the rest
// spread evenly: the buckets keep under a third of the chunks they
// filled (about 15% are not clear; the rest is what the sweeps have not
// looked at yet).
func TestFarBucketDropsDeadChunks(t *testing.T) {
	t.Parallel()
	st, _ := newInlineTimer(t, withWheelSize(256))
	x := &opTarget{}
	var live []*testOp
	for i := range 100_000 {
		o := newTestOp(i, 30*time.Second, x)
		_, err := st.AddOp(o.entry())
		require.NoError(t, err)
		if i%100 == 0 {
			live = append(live, o)
		} else {
			o.leave()
		}
	}
	chunks := 0
	st.wheel.levels(func(w *wheel) {
		for i := range w.buckets {
			for j := range w.buckets[i].stripes {
				chunks += len(w.buckets[i].stripes[j].slots.chunks)
			}
		}
	})
	filled := 100_000 / slotChunkLen
	assert.Less(t, chunks, filled/3, "chunks kept of %d filled, for %d pending of 100,000 parked", filled, len(live))
	assert.Equal(t, len(live), st.Size())
}
