package purgatory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// delayedFetch waits until its partition has minBytes past its offset.
type delayedFetch struct {
	operation.Base
	name     string
	log      *partitionLog
	offset   int
	minBytes int
}

type partitionLog struct{ bytes int }

func newDelayedFetch(name string, log *partitionLog, offset, minBytes int, maxWait time.Duration) *delayedFetch {
	f := &delayedFetch{name: name, log: log, offset: offset, minBytes: minBytes}
	f.Init(f, maxWait)
	return f
}

// TryComplete runs under the operation's lock.
func (f *delayedFetch) TryComplete() bool {
	if f.log.bytes-f.offset >= f.minBytes {
		return f.ForceComplete()
	}
	return false
}

func (f *delayedFetch) OnComplete() {
	fmt.Printf("%s: answered with %d bytes\n", f.name, f.log.bytes-f.offset)
}

func (f *delayedFetch) OnExpiration() { fmt.Printf("%s: max wait passed\n", f.name) }

// Writing an operation, parking it, and completing it from an event.
func Example() {
	mt := timer.NewMockTimer() // deterministic time for the example
	p, err := purgatory.New[operation.TopicPartitionKey, *delayedFetch]("Fetch",
		purgatory.WithTimer(mt), purgatory.WithoutReaper())
	if err != nil {
		panic(err)
	}
	defer p.Shutdown(context.Background())

	key := operation.TopicPartitionKey{Topic: "orders", Partition: 0}
	log := &partitionLog{}
	fast := newDelayedFetch("fetch-1", log, 0, 100, 500*time.Millisecond)
	slow := newDelayedFetch("fetch-2", log, 0, 1000, 500*time.Millisecond)
	for _, f := range []*delayedFetch{fast, slow} {
		if done, err := p.TryCompleteElseWatch(f, key); err != nil || done {
			panic("expected to park")
		}
	}
	fmt.Println("parked:", p.NumDelayed())

	// The leader appends: tell the purgatory.
	log.bytes += 150
	fmt.Println("completed by append:", p.CheckAndComplete(key))

	mt.Advance(500 * time.Millisecond)
	st := p.Stats()
	fmt.Printf("pending %d, completed early %d, expired %d\n", st.Pending, st.CompletedEarly, st.Expired)
	fmt.Println("time in purgatory, expired:", st.TimeInPurgatory.Expired)
	// Output:
	// parked: 2
	// fetch-1: answered with 150 bytes
	// completed by append: 1
	// fetch-2: answered with 150 bytes
	// fetch-2: max wait passed
	// pending 0, completed early 1, expired 1
	// time in purgatory, expired: n=1 p50=503ms p99=503ms max<537ms
}

// Wiring CheckAndComplete to an event: the component that changes state
// calls a hook after releasing its own locks.
func ExamplePurgatory_CheckAndComplete() {
	p, err := purgatory.New[string, *delayedFetch]("Fetch")
	if err != nil {
		panic(err)
	}
	defer p.Shutdown(context.Background())

	log := &partitionLog{}
	appended := func(partition string) {
		// Called by the log after an append, with no log lock held.
		p.CheckAndComplete(partition)
	}
	f := newDelayedFetch("fetch", log, 0, 10, time.Minute)
	_, _ = p.TryCompleteElseWatch(f, "p0")
	log.bytes = 10
	appended("p0")
	fmt.Println("pending:", p.NumDelayed())
	// Output:
	// fetch: answered with 10 bytes
	// pending: 0
}
