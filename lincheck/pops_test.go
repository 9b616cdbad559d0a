package lincheck

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// top is a test operation: its TryComplete says yes once the test has
// set ready (and then calls ForceComplete), and every callback is
// recorded with its stamps and the goroutine it ran on.
type top struct {
	operation.Base
	h       *phist
	id      int
	keys    []int
	lv      levels
	timeout time.Duration
	ready   atomic.Bool
	ctx     context.Context
	cancel  context.CancelCauseFunc
	// ctxAt is the stamp of the call that first cancelled its context.
	ctxAt atomic.Int64
	// resetAt is the stamp at which a ResetTimeout of it last returned true.
	resetAt atomic.Int64
	lock    *operation.SharedLock // nil: its own lock

	mu  sync.Mutex // guards rec; not the operation's lock
	rec oprec
}

// ltop is a top that is Leveled.
type ltop struct{ top }

func (l *ltop) WatchLevel(key int) int64 {
	for i := range l.lv.n {
		if l.lv.keys[i] == key {
			return l.lv.lvls[i]
		}
	}
	return 0
}

// tapped reaches the top of an operation of either type.
type tapped interface{ self() *top }

func (o *top) self() *top { return o }

// cb is one callback: its stamps, goroutine, and what it was told.
type cb struct {
	start, end int64
	g          uint64
	low        int64 // the stamp of the worker call it ran in, 0 if none
	cause      error
	outcome    purgatory.Outcome
	seq        int // Parked/Left: which Parked this is, or answers
	err        error
}

// tdone is a completion by the operation's own TryComplete.
type tdone struct {
	t0, oc int64 // before it read ready; OnComplete's start
	g      uint64
}

type oprec struct {
	complete []cb
	expire   []cb
	parked   []cb
	left     []cb
	refused  []cb
	tdone    []tdone
	tries    int
}

func (o *top) TryComplete() bool {
	t0 := stamp()
	o.mu.Lock()
	o.rec.tries++
	o.mu.Unlock()
	// Hold the operation's lock a little longer, so that what races the
	// park or the check has time to come in.
	for range o.h.cfg.slowTries {
		runtime.Gosched()
	}
	if blockTry != nil {
		blockTry(o)
	}
	if o.h.cfg.pauseForReset {
		o.pauseForReset()
	}
	if !o.ready.Load() {
		return false
	}
	if !o.ForceComplete() {
		return false
	}
	o.mu.Lock()
	oc := int64(0)
	if n := len(o.rec.complete); n > 0 {
		oc = o.rec.complete[n-1].start
	}
	o.rec.tdone = append(o.rec.tdone, tdone{t0: t0, oc: oc, g: goid()})
	o.mu.Unlock()
	return true
}

var blockTry func(*top)

// pauseForReset waits, up to a few hundred yields, for a reset of o to
// return and then for an Advance to begin and get a little way.
func (o *top) pauseForReset() {
	i := 0
	for ; i < 300 && o.resetAt.Load() == 0; i++ {
		runtime.Gosched()
	}
	r := o.resetAt.Load()
	if r == 0 {
		return
	}
	for ; i < 600 && o.h.advAt.Load() < r; i++ {
		runtime.Gosched()
	}
	for range 20 {
		runtime.Gosched()
	}
}

func (o *top) OnComplete() {
	c := cb{start: stamp(), g: goid(), cause: o.Cause()}
	c.low, _ = o.h.workers.callStart()
	c.end = stamp()
	o.mu.Lock()
	o.rec.complete = append(o.rec.complete, c)
	o.mu.Unlock()
}

func (o *top) OnExpiration() {
	c := cb{start: stamp(), g: goid(), cause: o.Cause()}
	c.end = stamp()
	o.mu.Lock()
	o.rec.expire = append(o.rec.expire, c)
	o.mu.Unlock()
}

// pobs is the observer: it records each Parked, Left and Refused on the
// operation's record.
type pobs struct{}

type parkState struct {
	o   *top
	seq int
}

func (pobs) Parked(p purgatory.Park) any {
	o := p.Operation.(tapped).self()
	c := cb{start: stamp(), g: goid()}
	c.end = stamp()
	o.mu.Lock()
	c.seq = len(o.rec.parked)
	o.rec.parked = append(o.rec.parked, c)
	o.mu.Unlock()
	return parkState{o, c.seq}
}

func (pobs) Left(state any, d purgatory.Departure) {
	ps, ok := state.(parkState)
	if !ok {
		panic(fmt.Sprintf("Left given %T, not what Parked returned", state))
	}
	c := cb{start: stamp(), g: goid(), outcome: d.Outcome, cause: d.Cause, seq: ps.seq}
	c.end = stamp()
	ps.o.mu.Lock()
	ps.o.rec.left = append(ps.o.rec.left, c)
	ps.o.mu.Unlock()
}

func (pobs) Refused(p purgatory.Park, err error) {
	o := p.Operation.(tapped).self()
	c := cb{start: stamp(), g: goid(), err: err}
	c.end = stamp()
	o.mu.Lock()
	o.rec.refused = append(o.rec.refused, c)
	o.mu.Unlock()
}

// cfkErr is the cause one CompleteForKey call gives: its id tells which
// call an OnComplete's Cause came from.
type cfkErr struct{ cid int }

func (e *cfkErr) Error() string { return fmt.Sprintf("completeForKey#%d", e.cid) }

// errCtx is the cause an operation's context is cancelled with.
var errCtx = errors.New("lincheck: context cancelled")
