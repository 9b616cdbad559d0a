package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/internal/hist"
)

// seamOp counts its callbacks. (The module's shared test operation imports
// this package, so it cannot be used from its internal tests.)
type seamOp struct {
	Op
	completes, expiries int
}

func (*seamOp) TryComplete() bool { return false }
func (s *seamOp) OnComplete()     { s.completes++ }
func (s *seamOp) OnExpiration()   { s.expiries++ }

// newSeamOp returns an initialised operation, tied to ctx (an operation
// without one: context.Background, which never ends).
func newSeamOp(ctx context.Context) *seamOp {
	o := &seamOp{}
	Init(&o.Op, o, 0, Options{Ctx: ctx})
	return o
}

// at runs f once at the named seam of tr's operations.
func at(tr *Tracker, name string, f func(o *Op)) {
	done := false
	once := func(o *Op) {
		if !done {
			done = true
			f(o)
		}
	}
	switch name {
	case "published":
		tr.Hooks = &Hooks{Published: once}
	case "registered":
		tr.Hooks = &Hooks{Registered: once}
	default:
		panic("no seam " + name)
	}
}

// A ForceComplete that lands after Park published its Tracker and Handle
// but before its CAS: Park fails, the operation was never counted, its
// new Handle lets go of it, and OnComplete ran once.
func TestForceCompleteBetweenPublishAndParkCAS(t *testing.T) {
	t.Parallel()
	o := newSeamOp(context.Background())
	var tr Tracker
	at(&tr, "published", func(o *Op) { require.True(t, ForceComplete(o)) })
	h, ok := Park(&o.Op, &tr, 0, false, 0)
	assert.False(t, ok)
	assert.Nil(t, h)
	assert.Equal(t, 1, o.completes)
	assert.Equal(t, Counts{}, tr.Counts(), "nothing counted, nothing left")
	assert.Nil(t, o.h.Op(), "the handle Park made does not hold the operation")
}

// The same for an operation with a context, whose Handle is the one Init
// made and Park keeps: the completion before the CAS neither reads nor
// clears it (there is nothing to release yet), Park's failed CAS clears
// what it wrote, and no AfterFunc is ever armed.
func TestForceCompleteOfFatOpBetweenPublishAndParkCAS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := newSeamOp(ctx)
	initHandle := o.h
	require.NotNil(t, initHandle, "an operation with a context has its Handle from Init")
	var tr Tracker
	at(&tr, "published", func(o *Op) {
		require.NotNil(t, o.h.Op(), "Park has filled in the Handle")
		require.True(t, ForceComplete(o))
	})
	h, ok := Park(&o.Op, &tr, 0, false, 0)
	assert.False(t, ok)
	assert.Nil(t, h)
	assert.Same(t, initHandle, o.h, "Park keeps Init's Handle")
	assert.Nil(t, o.h.Op(), "the failed park let go of the operation")
	assert.Nil(t, o.fat().stop.Load(), "no AfterFunc armed")
	cancel()
	assert.Equal(t, 1, o.completes)
	assert.Equal(t, Counts{}, tr.Counts(), "nothing counted, nothing left")
}

// A completion that lands after ArmContext registered the AfterFunc but
// before it stored the stop function: the completion found nothing to stop,
// so ArmContext must stop it itself, or a long-lived context would keep the
// operation registered until it ends.
func TestCompletionBetweenRegisterAndStoreStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := newSeamOp(ctx)
	var tr Tracker
	_, ok := Park(&o.Op, &tr, 0, false, 0)
	require.True(t, ok)
	at(&tr, "registered", func(o *Op) {
		require.Nil(t, o.fat().stop.Load(), "not stored yet")
		require.True(t, ForceComplete(o))
	})
	ArmContext(&o.Op)
	assert.Nil(t, o.fat().stop.Load(), "ArmContext took the stop function and called it")
	cancel()
	assert.Equal(t, 1, o.completes)
	assert.Equal(t, uint64(1), tr.Counts().Done[Early])
	assert.Equal(t, uint64(0), tr.Counts().Done[Context], "the context did not complete it again")
}

// clockWith returns a Tracker that records times on a clock whose every
// reading is end, and which runs f at its first reading. A completion
// reads the clock between loading the state word and its swap, so f runs
// exactly there. reads counts the readings.
func clockWith(end int64, f func()) (tr *Tracker, reads *int) {
	tr, reads = &Tracker{}, new(int)
	tr.Now = func() int64 {
		if *reads++; *reads == 1 {
			f()
		}
		return end
	}
	return tr, reads
}

// timeIn returns what tr recorded for kind k.
func timeIn(tr *Tracker, k Kind) hist.Snapshot {
	var s hist.Snapshot
	tr.Times(k, &s)
	return s
}

// An expiry that wins between a ForceComplete's clock read and its swap:
// the ForceComplete reports false, and only the expiry is counted and
// timed.
func TestExpiryBetweenClockReadAndSwap(t *testing.T) {
	o := newSeamOp(context.Background())
	tr, _ := clockWith(int64(5*time.Millisecond), func() { require.True(t, Expire(&o.Op, Expired)) })
	_, ok := Park(&o.Op, tr, 0, false, 0)
	require.True(t, ok)

	assert.False(t, ForceComplete(&o.Op))
	assert.Equal(t, 1, o.completes)
	assert.Equal(t, 1, o.expiries)
	c := tr.Counts()
	assert.Equal(t, [Kinds]uint64{Expired: 1}, c.Done)
	assert.Zero(t, c.Pending)
	assert.Equal(t, int64(5*time.Millisecond)+1, timeIn(tr, Expired).Hi)
	assert.Zero(t, timeIn(tr, Early).Hi, "the loser records nothing")
}

// A cancel between the clock read and the swap: the ForceComplete still
// completes the operation, as it does any cancelled one, but it was no
// longer parked, so nothing is counted or timed for it but the cancel.
func TestCancelBetweenClockReadAndSwap(t *testing.T) {
	o := newSeamOp(context.Background())
	tr, _ := clockWith(int64(5*time.Millisecond), func() { require.True(t, Cancel(&o.Op)) })
	_, ok := Park(&o.Op, tr, 0, false, 0)
	require.True(t, ok)

	assert.True(t, ForceComplete(&o.Op))
	assert.Equal(t, 1, o.completes)
	c := tr.Counts()
	assert.Equal(t, [Kinds]uint64{}, c.Done)
	assert.Equal(t, uint64(1), c.Cancelled)
	assert.Zero(t, c.Pending)
	assert.Zero(t, timeIn(tr, Early).Hi)
}
