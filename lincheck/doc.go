// Package lincheck is purgatory-go's linearizability check: many goroutines
// drive one purgatory (and, apart, one timer) on a timer.MockTimer, every
// call and callback is recorded with a logical timestamp, and the history
// is checked with porcupine against a sequential model of what
// docs/purgatory.md, docs/observing.md and docs/timer.md promise, plus
// per-history invariants (callbacks exactly once and in order, observer
// stories, counts exact at rest).
//
// It is a module of its own so that porcupine stays out of the library's
// go.mod. Everything is in its tests:
//
//	go test -race -run . ./...                        # a few seconds
//	go test -run . -args -lincheck.duration=2m        # longer (make lincheck)
//	go test -run 'TestPurgatory/reset' -args -lincheck.duration=30s
//
// The subtests are named after the workloads, each tuned to reach one
// kind of race (see purgatory_test.go).
package lincheck
