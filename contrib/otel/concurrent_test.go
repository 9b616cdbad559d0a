package purgatoryotel_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	purgatoryotel "github.com/purgatory-go/purgatory/contrib/otel"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// A live purgatory, with its own timer and reaper, parks, completes,
// expires, cancels and refuses traced requests from several goroutines
// while the metrics are collected, under the race detector. Once
// everything has stopped: every span started has ended, one per accepted
// operation whose request was sampled, each a child of its request; the
// counters match Stats; and each outcome's histogram counts what its
// counter does.
func TestLivePurgatoryUnderLoad(t *testing.T) {
	h := newHarness(t, "hammer", []purgatory.Option{purgatory.WithPurgeInterval(10), purgatory.WithMaxPending(150)})
	const workers, perWorker, keys = 2, 2000, 16
	var accepted, refused, cancelled, traced atomic.Int64
	var work sync.WaitGroup
	for w := range workers {
		work.Add(1)
		go func() {
			defer work.Done()
			r := rand.New(rand.NewPCG(uint64(w), 25))
			for i := range perWorker {
				k1, k2 := fmt.Sprint(r.IntN(keys)), fmt.Sprint(r.IntN(keys))
				// Half the requests are traced (their span is sampled).
				ctx := context.Background()
				var req trace.Span
				if i%2 == 0 {
					ctx, req = h.request(ctx)
				}
				ctx, cancel := context.WithCancel(ctx)
				var op *testOp
				switch i % 5 {
				case 0:
					op = newOp(time.Minute, operation.WithContext(ctx))
					op.ready.Store(true)
				case 1:
					op = newOp(time.Duration(r.IntN(3))*time.Millisecond, operation.WithContext(ctx))
				default:
					op = newOp(time.Minute, operation.WithContext(ctx))
				}
				_, err := h.p.TryCompleteElseWatch(op, k1, k2)
				switch {
				case errors.Is(err, purgatory.ErrFull):
					refused.Add(1)
				case assert.NoError(t, err):
					accepted.Add(1)
					if req != nil {
						traced.Add(1)
					}
				}
				switch i % 5 {
				case 2:
					cancel()
				case 3:
					op.ready.Store(true)
					h.p.CheckAndComplete(k1)
				case 4:
					if i%20 == 4 {
						cancelled.Add(int64(len(h.p.CancelForKey(k2))))
					} else {
						h.p.CompleteForKey(k1, errors.New("moved"))
					}
				}
				if req != nil {
					req.End()
				}
				cancel()
			}
		}()
	}
	stop := make(chan struct{})
	var collector sync.WaitGroup
	collector.Add(1)
	go func() {
		defer collector.Done()
		prev := map[string]int64{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			nums, _, _ := h.collect(t)
			for name, v := range nums {
				if name != "purgatory.size" && name != "purgatory.delayed_operations" {
					assert.GreaterOrEqual(t, v, prev[name], "%s went down", name)
				}
			}
			prev = nums
		}
	}()
	work.Wait()
	close(stop)
	collector.Wait()
	require.NoError(t, h.p.Shutdown(context.Background()))

	st := h.p.Stats()
	assert.Equal(t, uint64(refused.Load()), st.Full)
	assert.Equal(t, uint64(cancelled.Load()), st.Cancelled)
	ended := st.CompletedEarly + st.Expired + st.ContextDone + st.Shutdown + st.CompletedForKey + st.Cancelled
	assert.Equal(t, uint64(accepted.Load()), ended, "every accepted operation ended once")

	waits := 0
	for _, s := range h.spans.Ended() {
		if s.Name() == purgatoryotel.SpanName {
			waits++
			assert.True(t, s.Parent().IsValid(), "a child of its request")
		}
	}
	assert.Equal(t, len(h.spans.Started()), len(h.spans.Ended()), "every span started has ended")
	assert.Equal(t, int(traced.Load()), waits, "one span per traced operation")

	nums, hists, _ := h.collect(t)
	for outcome, counter := range map[string]string{
		"early": "purgatory.completed_early", "expired": "purgatory.expires", "context": "purgatory.context_done",
		"for_key": "purgatory.completed_for_key", "shutdown": "purgatory.expired_by_shutdown",
	} {
		assert.Equal(t, uint64(nums[counter]), hists[outcome].Count, "%s histogram vs %s", outcome, counter)
	}
	assert.Equal(t, int64(st.CompletedEarly), nums["purgatory.completed_early"])
	assert.Equal(t, int64(st.Expired), nums["purgatory.expires"])
	assert.Positive(t, nums["purgatory.expires"])
	assert.Positive(t, nums["purgatory.context_done"])
	assert.Positive(t, nums["purgatory.completed_for_key"])
	assert.Zero(t, nums["purgatory.delayed_operations"])
}
