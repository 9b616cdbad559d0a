package operation_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/purgatory-go/purgatory/internal/optest"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/timer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type op = optest.Op

func newOp(d time.Duration) *op { return optest.New(d) }

// ForceComplete from many goroutines at once, racing expiry: one winner,
// OnComplete once, OnExpiration only if expiry won.
func TestForceCompleteHasOneWinner(t *testing.T) {
	mt := timer.NewMockTimer()
	defer mt.Close()
	for range 200 {
		o := newOp(time.Millisecond)
		assert.NoError(t, mt.Add(o))
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
}

// A cancelled timeout does not expire a completed operation.
func TestCompletionCancelsTimeout(t *testing.T) {
	mt := timer.NewMockTimer()
	defer mt.Close()
	o := newOp(time.Second)
	assert.NoError(t, mt.Add(o))
	assert.Equal(t, 1, mt.Size())
	assert.True(t, o.ForceComplete())
	assert.Equal(t, 0, mt.Size())
	assert.False(t, o.ForceComplete())
	mt.Advance(time.Hour)
	assert.Equal(t, int32(0), o.Expiries.Load())
}

func TestInitChecksSelf(t *testing.T) {
	assert.PanicsWithValue(t, "operation: Init must be given the operation that embeds this Base", func() {
		var o op
		o.Init(nil, time.Second)
	})
	var o op
	assert.False(t, o.Initialised())
	o.Init(&o, time.Second)
	assert.True(t, o.Initialised())
	assert.Equal(t, time.Second, o.Delay())
	assert.Same(t, &o, o.Self())
}

func TestKeysPrint(t *testing.T) {
	assert.Equal(t, "orders-3", operation.TopicPartitionKey{Topic: "orders", Partition: 3}.String())
	assert.Equal(t, "g-m", operation.MemberKey{GroupID: "g", MemberID: "m"}.String())
}

// Base stays at 80 bytes: TaskBase plus two pointers.
func TestBaseIs80Bytes(t *testing.T) {
	assert.Equal(t, uintptr(80), unsafe.Sizeof(operation.Base{}))
}

// The operation's own lock excludes, blocks and wakes like a mutex.
func TestOwnLockExcludes(t *testing.T) {
	o := newOp(time.Second)
	l := o.Lock()
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				l.Lock()
				n := inside.Add(1)
				if n > maxInside.Load() {
					maxInside.Store(n)
				}
				inside.Add(-1)
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), maxInside.Load())
	tl := l.(interface{ TryLock() bool })
	assert.True(t, tl.TryLock())
	assert.False(t, tl.TryLock())
	l.Unlock()
	assert.Panics(t, func() { l.Unlock() })
}
