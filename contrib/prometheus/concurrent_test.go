package purgatoryprom_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	purgatoryprom "github.com/purgatory-go/purgatory/contrib/prometheus"
	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// scrape gathers reg and returns, for the purgatory named name, each
// gauge and counter by metric name and each histogram's _count by
// "hist/<outcome>".
func scrape(reg prometheus.Gatherer, name string) (map[string]float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var purg, outcome string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "purgatory":
					purg = lp.GetValue()
				case "outcome":
					outcome = lp.GetValue()
				}
			}
			if purg != name {
				continue
			}
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[mf.GetName()] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				out[mf.GetName()] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				out["hist/"+outcome] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out, nil
}

// Scrapes overlap each other, operations parking, completing, expiring
// on a real timer, ending by context, being cancelled and refused, and
// purgatories being added and removed, with the race detector watching.
// Every scrape succeeds and sees each counter and each histogram count
// never go down; once everything has stopped, the last scrape matches
// what the workers did exactly, and each outcome's histogram counts the
// same operations as its counter.
func TestConcurrentScrapesWhileOperationsMove(t *testing.T) {
	times := new(timing.Recorder)
	p, err := purgatory.New[int, *testOp]("hammer", purgatory.WithLogger(discard),
		purgatory.WithPurgeInterval(10), purgatory.WithMaxPending(200), purgatory.WithObserver(times))
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			assert.NoError(t, p.Shutdown(context.Background()))
		}
	}()
	c := purgatoryprom.NewCollector()
	require.NoError(t, c.Add("hammer", p, purgatoryprom.WithTimes(times)))
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))

	const workers, perWorker, keys = 2, 3000, 16
	var accepted, refused, cancelled atomic.Int64
	var work sync.WaitGroup
	for w := range workers {
		work.Add(1)
		go func() {
			defer work.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for i := range perWorker {
				k1, k2 := r.IntN(keys), r.IntN(keys)
				var op *testOp
				var cancel context.CancelFunc
				switch i % 6 {
				case 0: // ready at once: completes inside TryCompleteElseWatch
					op = newOp(time.Minute)
					op.ready.Store(true)
				case 1: // times out at once or within 2ms
					op = newOp(time.Duration(r.IntN(3)) * time.Millisecond)
				case 2: // only its context, a cancel or Shutdown can end it
					var ctx context.Context
					ctx, cancel = context.WithCancel(context.Background())
					op = newOp(time.Minute, operation.WithContext(ctx))
				case 3: // left for Shutdown or a cancel
					op = newOp(time.Minute)
				default: // completed by a check below
					op = newOp(time.Minute)
				}
				_, err := p.TryCompleteElseWatch(op, k1, k2)
				switch {
				case errors.Is(err, purgatory.ErrFull):
					refused.Add(1)
				case assert.NoError(t, err):
					accepted.Add(1)
				}
				if cancel != nil {
					cancel()
				}
				if i%6 >= 4 {
					op.ready.Store(true)
					p.CheckAndComplete(k1)
				}
				if i%97 == 0 {
					cancelled.Add(int64(len(p.CancelForKey(r.IntN(keys)))))
				}
			}
		}()
	}

	done := make(chan struct{})
	var bg sync.WaitGroup
	var scrapes atomic.Int64
	for range 2 {
		bg.Add(1)
		go func() {
			defer bg.Done()
			prev := map[string]float64{}
			for {
				got, err := scrape(reg, "hammer")
				if !assert.NoError(t, err) {
					return
				}
				scrapes.Add(1)
				for name, v := range got {
					if name != "purgatory_size" && name != "purgatory_delayed_operations" {
						assert.GreaterOrEqual(t, v, prev[name], "%s went down", name)
					}
				}
				prev = got
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	bg.Add(1)
	go func() {
		defer bg.Done() // a second name for the same purgatory comes and goes
		for {
			assert.NoError(t, c.Add("again", p, purgatoryprom.WithTimes(times)))
			assert.True(t, c.Remove("again"))
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	work.Wait()
	close(done)
	bg.Wait()
	assert.Positive(t, scrapes.Load())
	t.Logf("scrapes %d refused %d cancelled %d accepted %d", scrapes.Load(), refused.Load(), cancelled.Load(), accepted.Load())

	require.NoError(t, p.Shutdown(context.Background()))
	stopped = true
	got, err := scrape(reg, "hammer")
	require.NoError(t, err)
	st := p.Stats()

	assert.Zero(t, got["purgatory_delayed_operations"])
	assert.Zero(t, got["purgatory_size"])
	assert.Equal(t, float64(refused.Load()), got["purgatory_full_total"])
	assert.Equal(t, float64(cancelled.Load()), got["purgatory_cancelled_total"])
	ended := got["purgatory_completed_early_total"] + got["purgatory_expires_total"] +
		got["purgatory_context_done_total"] + got["purgatory_expired_by_shutdown_total"] +
		got["purgatory_cancelled_total"]
	assert.Equal(t, float64(accepted.Load()), ended, "every accepted operation ended one way")
	assert.Equal(t, float64(workers*perWorker), float64(accepted.Load()+refused.Load()))

	for outcome, counter := range map[string]string{
		"early":    "purgatory_completed_early_total",
		"expired":  "purgatory_expires_total",
		"context":  "purgatory_context_done_total",
		"shutdown": "purgatory_expired_by_shutdown_total",
	} {
		assert.Positive(t, got[counter], counter)
		assert.Equal(t, got[counter], got["hist/"+outcome], "%s histogram vs %s", outcome, counter)
	}
	assert.Equal(t, float64(st.CompletedEarly), got["purgatory_completed_early_total"])
	assert.Equal(t, float64(st.Expired), got["purgatory_expires_total"])
	assert.Equal(t, float64(st.Purged), got["purgatory_purged_total"])
}
