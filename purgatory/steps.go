package purgatory

// step names a point between two steps of TryCompleteElseWatch where
// another goroutine may act. This package's tests install hooks at these
// points, on the purgatory they test (export_test.go), to run a competitor
// exactly there.
type step int

// The steps, in order. Every one runs with the operation's lock held.
const (
	stepParked      step = iota // parked and its keys' checks marked, before the first TryComplete
	stepTried                   // the first TryComplete failed, before watching
	stepBetweenKeys             // watched on some keys, not yet on the rest
	stepWatched                 // watched on every key, before the last TryComplete
	stepTimed                   // the timeout is added, before the operation counts as pending

	// stepCancelRemoved is in CancelForKey and CompleteForKey: the key's
	// list is removed, its operations not yet cancelled or completed.
	stepCancelRemoved step = 100
	// stepDeferred is in a park that found its SharedLock held: refusals
	// are made, the park is not yet handed to the lock.
	stepDeferred step = 101
	// stepReset is in ResetTimeout: the deadline is moved and the timer
	// entry cancelled, not yet added again.
	stepReset step = 102
)

// hooks are a purgatory's test hooks; nil outside tests.
type hooks struct {
	step func(step)
}

func (p *Purgatory[K, T]) at(s step) {
	if h := p.hooks; h != nil && h.step != nil {
		h.step(s)
	}
}
