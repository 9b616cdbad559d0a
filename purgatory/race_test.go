//go:build race

package purgatory_test

// raceEnabled scales the largest tests down under the race detector, which
// slows them tenfold; make test runs them at full size without it too.
const raceEnabled = true
