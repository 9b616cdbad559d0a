package purgatory

import "github.com/purgatory-go/purgatory/internal/watchers"

// Step exposes the points of TryCompleteElseWatch to this package's tests.
type Step = step

const (
	StepParked      = stepParked
	StepTried       = stepTried
	StepBetweenKeys = stepBetweenKeys
	StepWatched     = stepWatched
	StepUnlocked    = stepUnlocked
	StepTimed       = stepTimed

	StepCancelRemoved = stepCancelRemoved
)

// Steps lists them in order.
var Steps = []Step{StepParked, StepTried, StepBetweenKeys, StepWatched, StepUnlocked, StepTimed}

func (s Step) String() string {
	if s == StepCancelRemoved {
		return "cancel-removed"
	}
	return [...]string{"parked", "tried", "between-keys", "watched", "unlocked", "timed"}[s]
}

// SetStepHook installs f at every step and returns a function that removes
// it. Tests that use it must not run in parallel.
func SetStepHook(f func(Step)) (restore func()) {
	stepHook = f
	return func() { stepHook = nil }
}

// PurgeStepSize is how many watch entries a step of the purge visits.
const PurgeStepSize = purgeStep

// PurgeStepSlack is how far past PurgeStepSize a step may go: it reads
// whole chunks of a list, at least two.
const PurgeStepSlack = 2 * watchers.MaxChunk
