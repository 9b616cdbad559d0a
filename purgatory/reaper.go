package purgatory

import (
	"context"
	"time"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
)

// AdvanceClock advances the timer, waiting up to timeout for a due bucket,
// and purges completed operations from the watch lists once Kafka's
// estimate says enough have piled up: one slice of the purge, of about
// 16,000 entries, a call, so that a purge of a hot key does not hold up
// expiries. The reaper calls it in a loop; call it yourself only with
// WithoutReaper, and regularly: a purge takes as many calls as it has slices.
func (p *Purgatory[K, T]) AdvanceClock(timeout time.Duration) {
	if p.timer != nil {
		p.timer.AdvanceClock(timeout)
	}
	p.maybePurge()
}

// maybePurge is Kafka's purge trigger (more than purgeInterval operations
// left since the last purge) with one condition added: the lists must hold
// more dead entries than live ones. A purge visits every entry; Kafka's
// trigger alone would, at a million completions a second, scan every list
// each millisecond. With the extra condition each purge is paid for by at
// least as many completions as it visits entries. Dead entries are 8-byte
// tombstones (the operations themselves are released at completion), so
// letting up to as many as there are live entries wait costs little.
//
// A round of the purge is done in slices of purgeSlice entries, one each
// call, so that a hot key's list of hundreds of thousands of entries does
// not hold up the expiries the reaper runs, nor the Watches of that key.
func (p *Purgatory[K, T]) maybePurge() {
	p.purgeMu.Lock()
	defer p.purgeMu.Unlock()
	if !p.purging.Load() && !p.purgeDue() {
		return
	}
	n, more := p.watchers.PurgeSlice(purgeSlice)
	p.purging.Store(more)
	if n > 0 {
		p.purged.Add(uint64(n))
	}
}

// purgeSlice is how many watch entries a slice of the purge visits: about
// 0.1-0.5 ms of work. At one slice a millisecond that is 16 million entries
// a second, above the 6 million that a million completions a second on
// three keys leave to visit (each round visits the live entries too, and
// no more of them than dead ones).
const purgeSlice = 1 << 14

// purgePoll is how long the reaper waits for the timer while a purge round
// is under way, so that the round goes on when nothing expires.
const purgePoll = time.Millisecond

// reaperPoll is how long the reaper waits for the timer otherwise (Kafka's
// 200 ms).
const reaperPoll = 200 * time.Millisecond

// purgeDue reports whether a purge round should start, and if so notes
// the completions it covers. The caller holds purgeMu.
func (p *Purgatory[K, T]) purgeDue() bool {
	_, live := p.tracker.Live()
	live = max(live, 0)
	dead := int64(p.watchers.Watched()) - live
	if dead <= live {
		return false
	}
	c := p.tracker.Counts()
	left := c.Cancelled
	for _, n := range c.Done {
		left += n
	}
	if left-p.purgedAt <= uint64(p.purgeInterval) {
		return false
	}
	p.purgedAt = left
	return true
}

// reap is Kafka's ExpiredOperationReaper.
func (p *Purgatory[K, T]) reap() {
	defer close(p.reaped)
	for {
		select {
		case <-p.done:
			return
		default:
		}
		poll := reaperPoll
		if p.purging.Load() {
			poll = purgePoll
		}
		if p.timer != nil {
			p.timer.AdvanceClock(poll)
		} else {
			select {
			case <-p.done:
				return
			case <-time.After(poll):
			}
		}
		p.maybePurge()
	}
}

// Shutdown stops the reaper and the timer and, unless
// WithLeavePendingOnShutdown was given, expires every pending operation
// (OnComplete, then OnExpiration, with Cause ErrShutdown) so that
// no parked request is left hanging. Afterwards TryCompleteElseWatch
// returns ErrShutdown. Shutdown is idempotent; if ctx ends before the
// reaper has stopped, it returns ctx.Err() and a later call may finish the
// job. Like CancelForKey it takes each pending operation's lock: do not
// call it from a callback.
func (p *Purgatory[K, T]) Shutdown(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.closed.Store(true)
		close(p.done)
		// Closing the timer wakes a reaper waiting in AdvanceClock, and
		// waits for expiries already handed to the executor. A callback that
		// never returns would hold it up, hence the goroutine and ctx.
		go func() {
			if p.timer != nil {
				_ = p.timer.Close()
			}
			<-p.reaped
			close(p.stopped)
		}()
	})
	select {
	case <-p.stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !p.leavePending {
		p.watchers.Each(func(o *lifecycle.Op) { lifecycle.Expire(o, lifecycle.Shutdown) })
	}
	return nil
}
