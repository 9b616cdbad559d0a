package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

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
	case "cause stored":
		tr.Hooks = &Hooks{CauseStored: once}
	default:
		panic("no seam " + name)
	}
}

// A ForceComplete that lands after Park published its meta and Handle
// (its own: the Tracker's timer keeps no slots) but before its CAS: Park
// fails, the operation was never counted, its Handle lets go of it, and
// OnComplete ran once.
func TestForceCompleteBetweenPublishAndParkCAS(t *testing.T) {
	t.Parallel()
	o := newSeamOp(context.Background())
	var tr Tracker
	at(&tr, "published", func(o *Op) { require.True(t, ForceComplete(o)) })
	h, ok := parkCounted(&o.Op, &tr, 0, 0, false)
	assert.False(t, ok)
	assert.Nil(t, h)
	assert.Equal(t, 1, o.completes)
	assert.Equal(t, Counts{}, tr.Counts(), "nothing counted, nothing left")
	assert.Nil(t, o.entry().Handle(), "the operation lets go of the handle Park made")
}

// The same for an operation with a context, whose meta is the one Init
// made and Park keeps: the completion before the CAS releases what there
// is, Park's failed CAS lets go of the Handle it made, and no AfterFunc
// is ever armed.
func TestForceCompleteOfFatOpBetweenPublishAndParkCAS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := newSeamOp(ctx)
	initMeta := o.fat()
	require.NotNil(t, initMeta, "an operation with a context has its meta from Init")
	var tr Tracker
	at(&tr, "published", func(o *Op) {
		require.NotNil(t, OpOf(o.entry().Handle()), "Park has made the Handle")
		require.True(t, ForceComplete(o))
	})
	h, ok := parkCounted(&o.Op, &tr, 0, 0, false)
	assert.False(t, ok)
	assert.Nil(t, h)
	assert.Same(t, initMeta, o.fat(), "Park keeps Init's meta")
	assert.Nil(t, o.entry().Handle(), "the failed park let go of the Handle")
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
	_, ok := parkCounted(&o.Op, &tr, 0, 0, false)
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

// event is one call of a recordingObserver.
type event struct {
	call   string // "parked" or "left"
	k      Outcome
	state  any
	parked int64
	end    int64
	tries  uint32
}

// recordingObserver records what a Tracker tells it, on a clock whose
// every reading is end, and runs f at its first reading. A completion
// reads the clock between loading the state word and its swap, so f runs
// exactly there. Parked returns a fresh pointer, which Left must get back.
type recordingObserver struct {
	end    int64
	f      func()
	reads  int
	events []event
}

func (r *recordingObserver) Now() int64 {
	if r.reads++; r.reads == 1 && r.f != nil {
		r.f()
	}
	return r.end
}

func (r *recordingObserver) Parked(o *Op, ctx context.Context, keys int) any {
	st := new(int)
	r.events = append(r.events, event{call: "parked", state: st})
	return st
}

func (r *recordingObserver) Left(o *Op, k Outcome, state any, parked, end int64, tries uint32) {
	r.events = append(r.events, event{"left", k, state, parked, end, tries})
}

// clockWith returns a Tracker whose Observer is a recordingObserver with
// end and f.
func clockWith(end int64, f func()) (*Tracker, *recordingObserver) {
	r := &recordingObserver{end: end, f: f}
	return &Tracker{Obs: r}, r
}

// An expiry that wins between a ForceComplete's clock read and its swap:
// the ForceComplete reports false, and only the expiry is counted and
// told to the Observer, with the state its Parked returned.
func TestExpiryBetweenClockReadAndSwap(t *testing.T) {
	o := newSeamOp(context.Background())
	tr, r := clockWith(int64(5*time.Millisecond), func() { require.True(t, Expire(&o.Op, Expired)) })
	_, ok := parkCounted(&o.Op, tr, 1, 0, false)
	require.True(t, ok)

	assert.False(t, ForceComplete(&o.Op))
	assert.Equal(t, 1, o.completes)
	assert.Equal(t, 1, o.expiries)
	c := tr.Counts()
	assert.Equal(t, [Completions]uint64{Expired: 1}, c.Done)
	assert.Zero(t, c.Pending)
	require.Len(t, r.events, 2, "parked, then one departure: the loser tells nothing")
	assert.Equal(t, event{"left", Expired, r.events[0].state, 1, int64(5 * time.Millisecond), 0}, r.events[1])
	assert.Nil(t, o.meta().obs, "the state is let go at the departure")
}

// A cancel between the clock read and the swap: the ForceComplete still
// completes the operation, as it does any cancelled one, but it was no
// longer parked, so nothing is counted or told for it but the cancel.
func TestCancelBetweenClockReadAndSwap(t *testing.T) {
	o := newSeamOp(context.Background())
	tr, r := clockWith(int64(5*time.Millisecond), func() { require.True(t, Cancel(&o.Op)) })
	_, ok := parkCounted(&o.Op, tr, 0, 0, false)
	require.True(t, ok)

	assert.True(t, ForceComplete(&o.Op))
	assert.Equal(t, 1, o.completes)
	c := tr.Counts()
	assert.Equal(t, [Completions]uint64{}, c.Done)
	assert.Equal(t, uint64(1), c.Cancelled)
	assert.Zero(t, c.Pending)
	require.Len(t, r.events, 2)
	assert.Equal(t, "left", r.events[1].call)
	assert.Equal(t, Cancelled, r.events[1].k)
	assert.Same(t, r.events[0].state, r.events[1].state)
}

// A ForceComplete between the Observer's Parked and Park's CAS: Park
// fails and counts nothing, and the Observer, told of a park, is told
// that it ended early, once, with its state back.
func TestForceCompleteBeforeParkCASIsToldToTheObserver(t *testing.T) {
	t.Parallel()
	o := newSeamOp(context.Background())
	tr, r := clockWith(7, nil)
	at(tr, "published", func(o *Op) { require.True(t, ForceComplete(o)) })
	_, ok := parkCounted(&o.Op, tr, 3, 2, false)
	assert.False(t, ok)
	assert.Equal(t, Counts{}, tr.Counts())
	require.Len(t, r.events, 2)
	assert.Equal(t, event{"left", Early, r.events[0].state, 3, 7, 0}, r.events[1])
}

// TryComplete calls are counted for the Observer only while the
// operation is parked, each one, and reported at its departure.
func TestTriesAreCounted(t *testing.T) {
	o := newSeamOp(context.Background())
	tr, r := clockWith(0, nil)
	TryComplete(&o.Op) // not parked: not run, not counted
	_, ok := parkCounted(&o.Op, tr, 0, 1, false)
	require.True(t, ok)
	for range 3 {
		assert.False(t, TryComplete(&o.Op))
	}
	require.True(t, ForceComplete(&o.Op))
	TryComplete(&o.Op) // completed: not run
	require.Len(t, r.events, 2)
	assert.Equal(t, uint32(3), r.events[1].tries)
}

// CompleteWith stores its cause, then swaps the state to completed. A
// competitor that completes the operation between the two wins: the
// operation completes once, as the competitor's kind, and reports the
// competitor's cause, not the stored one. A second CompleteWith there
// loses at once (issue 30, defect 4): only the call whose cause was stored
// first may complete the operation as ForKey, so that the call that
// counts it is the one whose cause it reports.
func TestCompletionBetweenCauseAndSwap(t *testing.T) {
	t.Parallel()
	errFirst, errSecond := errors.New("first"), errors.New("second")
	for _, c := range []struct {
		name      string
		act       func(o *Op)
		kind      Outcome
		firstWins bool
	}{
		{"ForceComplete", func(o *Op) { ForceComplete(o) }, Early, false},
		{"expiry", func(o *Op) { Expire(o, Expired) }, Expired, false},
		{"CompleteWith", func(o *Op) { assert.False(t, CompleteWith(o, &errSecond), "the second cause") }, ForKey, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newSeamOp(context.Background())
			var tr Tracker
			at(&tr, "cause stored", c.act)
			_, ok := parkCounted(&o.Op, &tr, 0, 1, false)
			require.True(t, ok)
			assert.Equal(t, c.firstWins, CompleteWith(&o.Op, &errFirst))
			k, done := KindOf(&o.Op)
			require.True(t, done)
			assert.Equal(t, c.kind, k)
			assert.Equal(t, 1, o.completes)
			if k == ForKey {
				assert.Equal(t, errFirst, KeyCause(&o.Op), "the first cause stored")
			}
			cnt := tr.Counts()
			assert.Equal(t, uint64(1), cnt.Done[c.kind])
			assert.Zero(t, cnt.Pending)
			assert.Zero(t, cnt.Watched)
		})
	}
}

// Regression (issue 30, defect 9): the expiry decides holding its entry's
// add-lock, from its check that the entry is the one that fired to its
// completing swap. A Reset that comes exactly then waits for the lock, and
// finds the operation completed: it reports false, and the operation
// expired at its old deadline. Before, the expiry claimed the entry and
// then swapped, and a Reset between the two reported false while the
// operation was still pending.
func TestResetWaitsForTheExpirysDecision(t *testing.T) {
	o := newSeamOp(context.Background())
	var tr Tracker
	reset := make(chan bool, 1)
	tr.Hooks = &Hooks{Deciding: func(op *Op) {
		go func() { reset <- Reset(op, time.Hour) }()
		select {
		case got := <-reset:
			t.Errorf("a Reset returned %v while the expiry held the add-lock", got)
			reset <- got
		case <-time.After(100 * time.Millisecond): // it waits, as it must
		}
	}}
	_, ok := parkCounted(&o.Op, &tr, 0, 1, false)
	require.True(t, ok)
	require.True(t, expire(&o.Op), "the entry fired and nothing had moved it")
	assert.False(t, <-reset, "the Reset found the operation completed")
	assert.Equal(t, 1, o.expiries)
	k, done := KindOf(&o.Op)
	assert.True(t, done)
	assert.Equal(t, Expired, k)
}

// A ForceComplete that lands after DeferPark published the meta of a park
// deferred to the holder of the operation's SharedLock, but before the
// swap that records the deferral: the park is refused, its place is given
// back, the Observer hears of the park and of an early departure with the
// state Parked returned, nothing is counted, and the deferred park never
// runs, not even when the lock is let go.
func TestForceCompleteBetweenPublishAndDeferralCAS(t *testing.T) {
	t.Parallel()
	sl := new(SharedLock)
	o := &seamOp{}
	Init(&o.Op, o, 0, Options{Lock: sl})
	tr, r := clockWith(7, nil)
	tr.MaxPending = 1
	at(tr, "published", func(o *Op) { require.True(t, ForceComplete(o)) })
	sl.Lock()
	ran := false
	got := DeferPark(&o.Op, tr, 3, 1, func() { ran = true })
	sl.Unlock()

	assert.Equal(t, Already, got)
	assert.False(t, ran, "a refused deferral leaves nothing to run")
	assert.Equal(t, 1, o.completes)
	assert.Equal(t, Counts{}, tr.Counts(), "nothing counted")
	assert.True(t, tr.Reserve(), "the place is given back")
	require.Len(t, r.events, 2)
	assert.Equal(t, "parked", r.events[0].call)
	assert.Equal(t, event{"left", Early, r.events[0].state, 3, 7, 0}, r.events[1])
}
