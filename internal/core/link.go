package core

// Link ties a timer of package timer (SystemTimer, MockTimer, a Reaper of
// either) to its engine. Those types embed a Link, which promotes only an
// unexported method, so that the purgatory can find the engine of a timer
// it was given (TimerOf) without a public accessor: it adds an
// operation's timeout there directly (AddOp), the slot of which is the
// operation's handle, and reschedules it in one step (Reschedule), which a
// Timer of the user's own cannot offer.
//
// A Link names its owner, and TimerOf answers only for that owner: a
// user's type that embeds a SystemTimer (to wrap its Add, say) gets the
// method promoted, but is a Timer of the user's own, and its Add is
// called.
type Link struct {
	t     *Timer
	owner any
}

// LinkTo returns a Link of owner to t.
func LinkTo(owner any, t *Timer) Link { return Link{t, owner} }

// LinkOf returns a Link of owner to the engine of x, a timer that owner
// wraps (a Reaper's), or the zero Link if x has none.
func LinkOf(owner, x any) Link { return Link{TimerOf(x), owner} }

func (l Link) coreLink() Link { return l }

// TimerOf returns the engine of x if x is the owner of a Link to one, or
// nil.
func TimerOf(x any) *Timer {
	h, ok := x.(interface{ coreLink() Link })
	if !ok {
		return nil
	}
	if l := h.coreLink(); l.owner == x {
		return l.t
	}
	return nil
}
