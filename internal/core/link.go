package core

// Link ties a timer of package timer (SystemTimer, MockTimer, a Reaper
// of either) to its engine. Those types embed a Link, which promotes only
// an unexported method, so that the purgatory can find the engine of a
// timer it was given (TimerOf) without a public accessor: it reschedules
// an operation's timeout there in one step (Reschedule), which a Timer of
// the user's own cannot offer.
type Link struct{ t *Timer }

// LinkTo returns a Link to t.
func LinkTo(t *Timer) Link { return Link{t} }

// LinkOf returns the Link of x, a timer that embeds one, or the zero Link.
func LinkOf(x any) Link { return Link{TimerOf(x)} }

func (l Link) coreTimer() *Timer { return l.t }

// TimerOf returns the engine of x if x embeds a Link to one, or nil.
func TimerOf(x any) *Timer {
	if h, ok := x.(interface{ coreTimer() *Timer }); ok {
		return h.coreTimer()
	}
	return nil
}
