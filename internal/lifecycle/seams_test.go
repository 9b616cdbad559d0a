package lifecycle

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// at runs f once at the named seam.
func at(t *testing.T, name string, f func(o *Op)) {
	done := false
	seam = func(n string, o *Op) {
		if n == name && !done {
			done = true
			f(o)
		}
	}
	t.Cleanup(func() { seam = nil })
}

// A ForceComplete that lands after Park published its Tracker and Handle
// but before its CAS: Park fails, the operation was never counted, its
// new Handle lets go of it, and OnComplete ran once.
func TestForceCompleteBetweenPublishAndParkCAS(t *testing.T) {
	o := newSeamOp(context.Background())
	at(t, "published", func(o *Op) { require.True(t, ForceComplete(o)) })
	var tr Tracker
	h, ok := Park(&o.Op, &tr, 0)
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := newSeamOp(ctx)
	initHandle := o.h
	require.NotNil(t, initHandle, "an operation with a context has its Handle from Init")
	at(t, "published", func(o *Op) {
		require.NotNil(t, o.h.Op(), "Park has filled in the Handle")
		require.True(t, ForceComplete(o))
	})
	var tr Tracker
	h, ok := Park(&o.Op, &tr, 0)
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := newSeamOp(ctx)
	var tr Tracker
	_, ok := Park(&o.Op, &tr, 0)
	require.True(t, ok)
	at(t, "registered", func(o *Op) {
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
