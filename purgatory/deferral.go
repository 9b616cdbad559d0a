package purgatory

import (
	"time"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/watchers"
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
// What waits is the operation's Handle, which its completion clears, so a
// completed operation is as unreachable from here as from the watch lists:
// what stays until the next drain is the 8-byte Handle.
//
// A park queues the Handle in the watch-list shard of its first key, under
// the lock it takes there to watch it (watchers.Watch with hold), so the
// queue costs a park no lock of its own. The reaper seals what was queued
// every deferHold, taking it from the shards, and, one deferHold later,
// adds what is still pending to the timer.
type deferral struct {
	take     func(dst []watchers.Chunks) []watchers.Chunks // the shards' queued Handles (TakeHeld)
	add      func(o *lifecycle.Op, now int64) error        // the timer's Add
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
)

type deferGen struct {
	at int64 // when it was sealed
	hs []watchers.Chunks
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
	hs := d.take(nil)
	if len(hs) == 0 {
		return
	}
	d.gens = append(d.gens, deferGen{at: now, hs: hs})
}

func (d *deferral) drain(g *deferGen, now int64) {
	for i, cs := range g.hs {
		for j, c := range cs {
			for _, h := range c {
				o := h.Op()
				if o == nil {
					continue // completed or cancelled meanwhile
				}
				settleAdd(o, d.add(o, now))
			}
			cs[j] = nil // no chunk is kept: what is held shrinks with the load
		}
		g.hs[i] = nil
	}
}

// clear drops what is held, for Shutdown once the reaper has returned:
// the operations are expired from the watch lists, or, with
// WithLeavePendingOnShutdown, left as they are.
func (d *deferral) clear() {
	d.take(nil)
	d.gens = nil
}
