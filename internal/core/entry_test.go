package core

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

func TestListSize(t *testing.T) {
	if got := unsafe.Sizeof(List{}); got%128 != 0 {
		t.Fatalf("List is %d bytes, not a multiple of 128", got)
	}
}

// What linking and unlinking write in a List shares one 64-byte line.
func TestHotFieldsInOneLine(t *testing.T) {
	if end := hotEnd(); end > 64 {
		t.Fatalf("the hot fields end at byte %d, past the first line", end)
	}
}

// The add-lock excludes: goroutines that take it with LockAdd and HoldAdd
// never overlap, and a goroutine that found it held and went to sleep is
// woken by the holder's UnlockAdd (a lost wake-up would hang the test).
func TestAddLockExcludesAndWakes(t *testing.T) {
	var e Entry
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				if (g+i)%2 == 0 {
					e.LockAdd()
				} else {
					e.HoldAdd()
				}
				n := inside.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				if i%100 == 0 {
					runtime.Gosched() // let others find it held and sleep
				}
				inside.Add(-1)
				e.UnlockAdd()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), most.Load())
	assert.Zero(t, e.State.Load()&(addLock|addWaiters), "let go, and no one asleep")
}
