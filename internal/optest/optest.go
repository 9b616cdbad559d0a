// Package optest provides the delayed operation this module's tests share:
// one that completes once marked Ready, and counts its callbacks (Kafka's
// MockDelayedOperation in DelayedOperationTest).
package optest

import (
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/operation"
)

// Op completes when Ready is set and it is checked.
type Op struct {
	operation.Base
	Ready     atomic.Bool
	Tries     atomic.Int32 // calls of TryComplete
	Completes atomic.Int32
	Expiries  atomic.Int32

	// OnCompleteHook, if set, runs inside OnComplete. Set it before the
	// operation is parked.
	OnCompleteHook func()
}

// New returns an initialised Op with the given timeout.
func New(timeout time.Duration, opts ...operation.InitOption) *Op {
	o := &Op{}
	o.Init(o, timeout, opts...)
	return o
}

// TryComplete completes the operation if it is Ready.
func (o *Op) TryComplete() bool {
	o.Tries.Add(1)
	if o.Ready.Load() {
		return o.ForceComplete()
	}
	return false
}

// OnComplete counts, then runs OnCompleteHook.
func (o *Op) OnComplete() {
	o.Completes.Add(1)
	if o.OnCompleteHook != nil {
		o.OnCompleteHook()
	}
}

// OnExpiration counts.
func (o *Op) OnExpiration() { o.Expiries.Add(1) }
