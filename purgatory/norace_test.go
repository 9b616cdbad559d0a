//go:build !race

package purgatory_test

const raceEnabled = false
