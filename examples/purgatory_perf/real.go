package main

import (
	"context"

	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// fakeOp is Kafka's FakeOperation on this project's purgatory.
type fakeOp struct {
	operation.Base
	req request
}

func (f *fakeOp) TryComplete() bool {
	if now() >= f.req.completesAt {
		return f.ForceComplete()
	}
	return false
}

func (f *fakeOp) OnComplete()   { track.onComplete(f.IsExpired()) }
func (f *fakeOp) OnExpiration() { track.onExpire(&f.req) }

func (f *fakeOp) forceComplete() bool { return f.ForceComplete() }

type real struct {
	p *purgatory.Purgatory[string, *fakeOp]
}

func newReal() *real {
	opts := []purgatory.Option{purgatory.WithTimerOptions(timer.WithExecutors(executors))}
	if timeInPurgatory {
		opts = append(opts, purgatory.WithObserver(new(timing.Recorder)))
	}
	p, err := purgatory.New[string, *fakeOp]("fake purgatory", opts...)
	if err != nil {
		panic(err)
	}
	return &real{p}
}

func (r *real) park(req request, keys []string) (*fakeOp, bool, error) {
	op := &fakeOp{req: req}
	op.Init(op, track.timeout)
	done, err := r.p.TryCompleteElseWatch(op, keys...)
	return op, err == nil && !done, err
}

func (r *real) pending() int { return r.p.NumDelayed() }

func (r *real) shutdown() { _ = r.p.Shutdown(context.Background()) }
