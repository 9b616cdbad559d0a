package purgatory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Exactly-once storm: many operations on random keys with short timeouts,
// while goroutines mark them completable and check their keys, and others
// force-complete them directly. Every OnComplete runs once; OnExpiration
// runs at most once and only where expiry won; the gauges drain to zero.
func TestExactlyOnceStorm(t *testing.T) {
	const (
		n    = 20000
		keys = 64
	)
	p, err := purgatory.New[string, *mockOp]("storm",
		purgatory.WithPurgeInterval(100),
		purgatory.WithTimerOptions(timer.WithTick(200*time.Microsecond)))
	require.NoError(t, err)
	defer p.Shutdown(context.Background())

	key := func(i int) string { return fmt.Sprintf("k%d", i) }
	ops := make([]*mockOp, n)
	opKeys := make([][]string, n)
	for i := range ops {
		ops[i] = newOp(time.Duration(1+rand.IntN(30)) * time.Millisecond)
		for range 1 + rand.IntN(3) {
			opKeys[i] = append(opKeys[i], key(rand.IntN(keys)))
		}
	}
	var parked atomic.Int64 // operations [0, parked) have been offered
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the parker
		defer wg.Done()
		for i := range ops {
			_, err := p.TryCompleteElseWatch(ops[i], opKeys[i]...)
			assert.NoError(t, err)
			parked.Store(int64(i + 1))
		}
	}()
	stop := make(chan struct{})
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				m := parked.Load()
				if m == 0 {
					continue
				}
				i := r.IntN(int(m))
				if g == 0 { // the forcer
					ops[i].ForceComplete()
					continue
				}
				ops[i].Ready.Store(true)
				ks := opKeys[i]
				p.CheckAndComplete(ks[r.IntN(len(ks))])
			}
		}()
	}
	require.Eventually(t, func() bool { return parked.Load() == n && p.NumDelayed() == 0 },
		2*time.Minute, time.Millisecond)
	close(stop)
	wg.Wait()
	for i := range keys {
		p.CheckAndComplete(key(i))
	}
	assert.Equal(t, 0, p.Watched())
	var expired uint64
	for i, o := range ops {
		require.Equal(t, int32(1), o.Completes.Load(), "operation %d: OnComplete count", i)
		e := o.Expiries.Load()
		require.LessOrEqual(t, e, int32(1))
		require.Equal(t, o.IsExpired(), e == 1, "operation %d: OnExpiration only where expiry won", i)
		expired += uint64(e)
	}
	s := p.Stats()
	assert.Equal(t, expired, s.Expired)
	assert.Equal(t, uint64(n), s.CompletedEarly+s.Expired)
	t.Logf("stats: %+v", s)
}
