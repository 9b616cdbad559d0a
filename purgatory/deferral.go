package purgatory

import (
	"sync"
	"time"
	"unsafe"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/timer"
)

// A deferral holds back the timeouts of newly parked operations whose
// timeout is long, and puts into the timer only those still pending a
// while later. Most operations with a long timeout complete early (a
// produce waits milliseconds for its replicas and has 30 s to do it):
// those complete without ever entering the timer, and their completion
// has no bucket entry to unlink. In perf run C, where nearly every request
// completes within a tenth of its timeout, the timer's add and cancel were
// about a quarter of the CPU a request took.
//
// A parked operation's deadline is fixed at park (Tracker.OwnDeadline),
// so the time it spends here moves nothing: it is added to the timer with
// that deadline, at most deferMaxWait after its park, and only operations
// whose timeout is at least twice that are held here. It is never early,
// and, while the reaper keeps time, no later than it would have been.
//
// What waits here is the operation's Handle, which its completion clears,
// so a completed operation is as unreachable from here as from the watch
// lists: what stays until the next drain is the 8-byte Handle.
//
// Parks push; the reaper seals what was pushed every deferHold and, one
// deferHold later, adds what is still pending to the timer.
type deferral struct {
	stripes [deferStripes]deferStripe

	// The rest belongs to the goroutine that calls step: the reaper.
	add      func(o *lifecycle.Op, now int64) error // the timer's Add
	sealedAt int64
	gens     []deferGen // sealed, oldest first
}

const (
	// deferHold is how long a batch is collected, and then how long it
	// waits once sealed: an operation waits between one and two of it,
	// when the reaper keeps time.
	deferHold = int64(100 * time.Millisecond)
	// deferMaxWait bounds the wait when it does not: an idle reaper
	// sleeps up to a ReaperPoll before it seals what a park pushed.
	deferMaxWait = int64(timer.ReaperPoll) + 2*deferHold
	// deferMinTimeout is the shortest timeout that is deferred: the
	// operation still has half of it, or more, when it enters the timer.
	deferMinTimeout = 2 * time.Duration(deferMaxWait)
	deferStripes    = 16
)

type deferStripe struct {
	mu sync.Mutex
	hs []*lifecycle.Handle
	// Parks on different cores push to different stripes: keep each on
	// lines of its own.
	_ [128 - 8 - 24]byte
}

type deferGen struct {
	at int64 // when it was sealed
	hs [deferStripes][]*lifecycle.Handle
}

// push holds back the timeout of o, parked with Handle h.
func (d *deferral) push(o *lifecycle.Op, h *lifecycle.Handle) {
	s := &d.stripes[(uintptr(unsafe.Pointer(o))>>7)%deferStripes]
	s.mu.Lock()
	s.hs = append(s.hs, h)
	s.mu.Unlock()
}

// step seals what was pushed since the last seal, if that was deferHold
// ago, and adds to the timer the operations of every batch sealed
// deferHold ago that are still pending. It reports when it wants to be
// called again: in 0 < wait <= deferHold while anything is held, or 0 if
// nothing is.
func (d *deferral) step(now int64) (wait time.Duration) {
	if now-d.sealedAt >= deferHold {
		d.seal(now)
	}
	for len(d.gens) > 0 && now-d.gens[0].at >= deferHold {
		d.drain(&d.gens[0], now)
		d.gens[0] = deferGen{}
		d.gens = d.gens[1:]
	}
	if len(d.gens) == 0 {
		return 0
	}
	next := min(d.sealedAt, d.gens[0].at) + deferHold
	return time.Duration(max(next-now, int64(time.Millisecond)))
}

func (d *deferral) seal(now int64) {
	d.sealedAt = now
	var g deferGen
	held := false
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		g.hs[i], s.hs = s.hs, nil
		s.mu.Unlock()
		held = held || len(g.hs[i]) > 0
	}
	if !held {
		return
	}
	g.at = now
	d.gens = append(d.gens, g)
}

func (d *deferral) drain(g *deferGen, now int64) {
	for i, hs := range g.hs {
		for _, h := range hs {
			o := h.Op()
			if o == nil {
				continue // completed or cancelled meanwhile
			}
			settleAdd(o, d.add(o, now))
		}
		g.hs[i] = nil // no slice is kept: what is held shrinks with the load
	}
}

// clear drops what is held, for Shutdown once the reaper has returned:
// the operations are expired from the watch lists, or, with
// WithLeavePendingOnShutdown, left as they are.
func (d *deferral) clear() {
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		s.hs = nil
		s.mu.Unlock()
	}
	d.gens = nil
}
