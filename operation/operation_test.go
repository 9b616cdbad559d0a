package operation_test

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type op = optest.Op

func newOp(d time.Duration) *op { return optest.New(d) }

// ForceComplete from many goroutines at once, racing expiry: one winner,
// OnComplete once, OnExpiration only if expiry won.
func TestForceCompleteHasOneWinner(t *testing.T) {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *op]("winner", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	for range 200 {
		o := newOp(time.Millisecond)
		_, err := p.TryCompleteElseWatch(o, "k")
		require.NoError(t, err)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if o.ForceComplete() {
					wins.Add(1)
				}
			}()
		}
		mt.Advance(time.Millisecond)
		wg.Wait()
		assert.Equal(t, int32(1), o.Completes.Load())
		expired := o.Expiries.Load() == 1
		assert.Equal(t, expired, o.IsExpired())
		if expired {
			assert.Equal(t, int32(0), wins.Load())
		} else {
			assert.Equal(t, int32(1), wins.Load())
		}
	}
	assert.Equal(t, 0, p.NumDelayed())
	st := p.Stats()
	assert.Equal(t, uint64(200), st.CompletedEarly+st.Expired)
}

func TestInitChecksSelf(t *testing.T) {
	assert.PanicsWithValue(t, "operation: Init must be given the operation that embeds this Base", func() {
		var o op
		o.Init(nil, time.Second)
	})
	var o, other op
	assert.Panics(t, func() { o.Init(&other, time.Second) })
	o.Init(&o, time.Second)
	assert.Equal(t, time.Second, o.Timeout())
}

// Cause is nil until the operation completes, and nil for an early
// completion.
func TestCauseOfEarlyCompletion(t *testing.T) {
	o := newOp(time.Second)
	assert.NoError(t, o.Cause())
	assert.True(t, o.ForceComplete())
	assert.NoError(t, o.Cause())
	assert.False(t, o.IsExpired())
	assert.False(t, o.IsCancelled())
}

func TestKeysPrint(t *testing.T) {
	assert.Equal(t, "orders-3", operation.TopicPartitionKey{Topic: "orders", Partition: 3}.String())
	assert.Equal(t, "g-m", operation.MemberKey{GroupID: "g", MemberID: "m"}.String())
}

// Base is 64 bytes, a size class of the allocator's: the timer entry (56
// bytes: the state words, one of which holds the operation's lock, the
// deadline, the delay, the owner, the handle and the current slot) and
// the meta pointer.
func TestBaseIs64Bytes(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(operation.Base{}))
}

// causeOp is an operation written as the docs say: it embeds Base,
// completes when ready reports true (never, if ready is nil), and hands
// its Cause to answer from OnComplete.
type causeOp struct {
	operation.Base
	ready  func() bool
	answer func(cause error)
}

func newCauseOp(timeout time.Duration, ready func() bool, answer func(error)) *causeOp {
	o := &causeOp{ready: ready, answer: answer}
	o.Init(o, timeout)
	return o
}

func (o *causeOp) TryComplete() bool {
	if o.ready != nil && o.ready() {
		return o.ForceComplete()
	}
	return false
}

func (o *causeOp) OnComplete()   { o.answer(o.Cause()) }
func (o *causeOp) OnExpiration() {}

// A check that finds the condition met completes the operation early, and
// its OnComplete sees a nil Cause; a timeout reaches OnComplete as
// ErrExpired; OnComplete runs once for each.
func TestCauseReachesOnComplete(t *testing.T) {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *causeOp]("cause", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	var ready atomic.Bool
	var causes []error
	answer := func(cause error) { causes = append(causes, cause) }
	a := newCauseOp(time.Second, ready.Load, answer)
	b := newCauseOp(time.Second, nil, answer)
	for _, op := range []*causeOp{a, b} {
		done, err := p.TryCompleteElseWatch(op, "k")
		require.NoError(t, err)
		require.False(t, done)
	}
	ready.Store(true)
	assert.Equal(t, 1, p.CheckAndComplete("k"), "one that is never ready is not completed by a check")
	mt.Advance(time.Second)
	assert.Equal(t, []error{nil, operation.ErrExpired}, causes)
	assert.True(t, b.IsExpired())
}

// shadowing declares methods of its own named like the lifecycle's and
// the timer's (Run, ExpireEntry), as a user's type is free to.
type shadowing struct {
	operation.Base
	expired, theirs atomic.Int32
}

func (*shadowing) TryComplete() bool { return false }
func (*shadowing) OnComplete()       {}
func (s *shadowing) OnExpiration()   { s.expired.Add(1) }
func (s *shadowing) Run()            { s.theirs.Add(1) }
func (s *shadowing) ExpireEntry()    { s.theirs.Add(1) }

// The timer reaches an operation through the target its purgatory sets,
// not through a method of the user's type: one that declares Run and
// ExpireEntry of its own is accepted by Init and expires like any other,
// and neither method is called.
func TestUsersMethodsDoNotReachTheLifecycle(t *testing.T) {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[string, *shadowing]("shadow", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	require.NoError(t, err)
	defer p.Shutdown(context.Background())
	op := &shadowing{}
	op.Init(op, time.Second)
	done, err := p.TryCompleteElseWatch(op, "k")
	require.NoError(t, err)
	require.False(t, done)
	assert.Equal(t, 1, mt.Advance(time.Second))
	assert.True(t, op.IsExpired())
	assert.Equal(t, int32(1), op.expired.Load())
	assert.Zero(t, op.theirs.Load(), "the user's Run or ExpireEntry was called")
}

// A type that embeds Base gets exactly the methods Base's docs describe:
// nothing of the lifecycle or the timer is promoted onto it.
func TestBaseMethodSetIsDocumented(t *testing.T) {
	var names []string
	typ := reflect.TypeOf(&struct{ operation.Base }{})
	for i := range typ.NumMethod() {
		names = append(names, typ.Method(i).Name)
	}
	assert.Equal(t, []string{"Cause", "ForceComplete", "Init", "IsCancelled", "IsCompleted", "IsExpired", "Timeout"}, names)
}

// ForceComplete of an operation never initialised panics with a message
// that names Init, not with an interface conversion from deep inside.
func TestForceCompleteBeforeInitNamesInit(t *testing.T) {
	var op optest.Op
	assert.PanicsWithValue(t, "operation: ForceComplete of an operation whose Base.Init was not called",
		func() { op.ForceComplete() })
	assert.False(t, op.IsCompleted())
}
