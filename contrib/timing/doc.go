// Package timing records how long operations stay in a purgatory
// (package github.com/purgatory-go/purgatory/purgatory): a [Recorder] is a
// purgatory.Observer that keeps one [Histogram] for each way an operation
// completes, and [Recorder.Snapshot] reads them out as a
// [TimeInPurgatory]. It is a module of its own, outside the library: the
// library tells any Observer how long each operation stayed, and keeping
// histograms of it is one adapter among others.
//
// The histograms have fixed log-scale buckets, eight per power of two
// from 1µs to about 4.9 hours, at most 12.5% wide: a quantile read off
// one is within a bucket of the true one. Recording is lock-free and
// allocates nothing; snapshots of any recorders merge. contrib/prometheus
// exports a Recorder's histograms; contrib/otel records its own with
// OpenTelemetry's instruments instead.
//
// The time is measured by the purgatory, from the park to the completion,
// on its timer's clock (a timer.MockTimer's makes the figures exact in
// tests; with WithoutTimer, timer.SystemClock). A purgatory without an
// observer reads no clock at all.
package timing
