package purgatory

import (
	"github.com/purgatory-go/purgatory/internal/lifecycle"
	"github.com/purgatory-go/purgatory/internal/watchers"
	"github.com/purgatory-go/purgatory/operation"
)

// Step exposes the points of TryCompleteElseWatch to this package's tests.
type Step = step

const (
	StepParked      = stepParked
	StepTried       = stepTried
	StepBetweenKeys = stepBetweenKeys
	StepWatched     = stepWatched
	StepTimed       = stepTimed

	StepCancelRemoved = stepCancelRemoved
	StepDeferred      = stepDeferred
	StepReset         = stepReset
)

// Steps lists them in order.
var Steps = []Step{StepParked, StepTried, StepBetweenKeys, StepWatched, StepTimed}

func (s Step) String() string {
	switch s {
	case StepCancelRemoved:
		return "cancel-removed"
	case StepDeferred:
		return "deferred"
	case StepReset:
		return "reset"
	}
	return [...]string{"parked", "tried", "between-keys", "watched", "timed"}[s]
}

// SetStepHook installs f at every step of p, and returns a function that
// removes it. Only the goroutine that parks reads it: install and remove
// it while no other goroutine parks in p.
func SetStepHook[K comparable, T operation.DelayedOperation](p *Purgatory[K, T], f func(Step)) (restore func()) {
	p.installHooks()
	p.hooks.step = f
	p.watchers.BetweenKeys = func() { p.at(stepBetweenKeys) }
	return func() {
		p.hooks.step = nil
		p.watchers.BetweenKeys = nil
	}
}

// SetContendedHook installs f to run when a goroutine is about to wait for
// the own lock of an operation parked in p. Call it before p is shared.
func SetContendedHook[K comparable, T operation.DelayedOperation](p *Purgatory[K, T], f func(*lifecycle.Op)) {
	p.tracker.Hooks = &lifecycle.Hooks{Contended: f}
}

// SetClaimedHook installs f to run when an expiry by p's timer has found
// an operation's entry fired and the operation pending, before its
// completing swap. Call it before p is shared.
func SetClaimedHook[K comparable, T operation.DelayedOperation](p *Purgatory[K, T], f func(*lifecycle.Op)) {
	p.tracker.Hooks = &lifecycle.Hooks{Claimed: f}
}

func (p *Purgatory[K, T]) installHooks() {
	if p.hooks == nil {
		p.hooks = &hooks{}
	}
}

// PurgeSliceSize is how many watch entries a slice of the purge visits.
const PurgeSliceSize = purgeSlice

// PurgeSliceSlack is how far past PurgeSliceSize a step may go: it reads
// whole chunks of a list, at least two.
const PurgeSliceSlack = 2 * watchers.MaxChunk

// SetPublishedHook installs f to run in a park once the operation's
// Tracker and Handle are published, before the swap that parks it. Call it
// before p is shared.
func SetPublishedHook[K comparable, T operation.DelayedOperation](p *Purgatory[K, T], f func(*lifecycle.Op)) {
	p.tracker.Hooks = &lifecycle.Hooks{Published: f}
}
