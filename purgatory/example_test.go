package purgatory_test

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
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
	quiet    bool // print nothing
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
	if f.quiet {
		return
	}
	fmt.Printf("%s: answered with %d bytes\n", f.name, f.log.bytes-f.offset)
}

func (f *delayedFetch) OnExpiration() {
	if !f.quiet {
		fmt.Printf("%s: max wait passed\n", f.name)
	}
}

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
	// Output:
	// parked: 2
	// fetch-1: answered with 150 bytes
	// completed by append: 1
	// fetch-2: answered with 150 bytes
	// fetch-2: max wait passed
	// pending 0, completed early 1, expired 1
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

// CancelForKey takes every operation watching a key out of the purgatory,
// uncompleted, for the caller to answer: here a partition that moved away.
func ExamplePurgatory_CancelForKey() {
	p, _ := purgatory.New[string, *delayedFetch]("Fetch", purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper())
	defer p.Shutdown(context.Background())

	log := &partitionLog{}
	a := newDelayedFetch("fetch-a", log, 0, 100, time.Second)
	b := newDelayedFetch("fetch-b", log, 0, 100, time.Second)
	_, _ = p.TryCompleteElseWatch(a, "orders-0", "orders-1")
	_, _ = p.TryCompleteElseWatch(b, "orders-1")

	for _, f := range p.CancelForKey("orders-0") {
		fmt.Println("cancelled:", f.name, "completed:", f.IsCompleted())
	}
	fmt.Println("still pending:", p.NumDelayed(), "watch entries:", p.Watched())
	// Output:
	// cancelled: fetch-a completed: false
	// still pending: 1 watch entries: 1
	// fetch-b: answered with 0 bytes
	// fetch-b: max wait passed
}

// WithMaxPending bounds the requests parked at once; past it,
// TryCompleteElseWatch refuses with ErrFull and the caller answers "busy".
func ExampleWithMaxPending() {
	p, _ := purgatory.New[string, *delayedFetch]("Fetch", purgatory.WithMaxPending(2),
		purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper())
	defer p.Shutdown(context.Background())

	log := &partitionLog{}
	for i := range 3 {
		f := newDelayedFetch(fmt.Sprint("fetch-", i), log, 0, 100, time.Second)
		if _, err := p.TryCompleteElseWatch(f, "orders-0"); errors.Is(err, purgatory.ErrFull) {
			fmt.Println(f.name, "refused: busy")
		}
	}
	fmt.Println("pending:", p.NumDelayed(), "refused:", p.Stats().Full)
	// Output:
	// fetch-2 refused: busy
	// pending: 2 refused: 1
	// fetch-0: answered with 0 bytes
	// fetch-0: max wait passed
	// fetch-1: answered with 0 bytes
	// fetch-1: max wait passed
}

// Testing an operation of your own: a MockTimer moves time only when the
// test says so, and expiries run on the test's goroutine, so a timeout is
// checked to the nanosecond.
func Example_testingWithMockTimer() {
	mt := timer.NewMockTimer()
	p, _ := purgatory.New[string, *delayedFetch]("Fetch", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	defer p.Shutdown(context.Background())

	f := newDelayedFetch("fetch", &partitionLog{}, 0, 100, 250*time.Millisecond)
	_, _ = p.TryCompleteElseWatch(f, "orders-0")
	mt.Advance(249 * time.Millisecond)
	fmt.Println("at 249ms completed:", f.IsCompleted())
	mt.Advance(time.Millisecond)
	fmt.Println("at 250ms expired:", f.IsExpired())
	// Output:
	// at 249ms completed: false
	// fetch: answered with 0 bytes
	// fetch: max wait passed
	// at 250ms expired: true
}

// Stats published with expvar at /debug/vars. The library itself imports
// neither expvar nor net/http: publishing is one line of the program's own.
func ExamplePurgatory_Stats_expvar() {
	mt := timer.NewMockTimer()
	p, _ := purgatory.New[string, *delayedFetch]("Fetch", purgatory.WithTimer(mt), purgatory.WithoutReaper())
	defer p.Shutdown(context.Background())
	expvar.Publish("example.purgatory.fetch", expvar.Func(func() any { return p.Stats() }))

	_, _ = p.TryCompleteElseWatch(newDelayedFetch("fetch", &partitionLog{}, 0, 100, time.Second), "orders-0")
	mt.Advance(time.Second)

	var st struct{ Pending, Expired int }
	_ = json.Unmarshal([]byte(expvar.Get("example.purgatory.fetch").String()), &st)
	fmt.Println("pending:", st.Pending, "expired:", st.Expired)
	// Output:
	// fetch: answered with 0 bytes
	// fetch: max wait passed
	// pending: 0 expired: 1
}

// slowLog is an Observer that reports operations that waited longer than
// limit, with how many checks they took. It keeps no state per operation.
type slowLog struct{ limit time.Duration }

func (slowLog) Parked(purgatory.Park) any { return nil }

func (s slowLog) Left(_ any, d purgatory.Departure) {
	if d.Time > s.limit {
		fmt.Printf("slow: %v after %v and %d tries (cause: %v)\n", d.Outcome, d.Time, d.Tries, d.Cause)
	}
}

func (slowLog) Refused(p purgatory.Park, err error) { fmt.Println("refused:", err) }

// An Observer of its own: told of every park, departure and refusal.
func ExampleWithObserver() {
	mt := timer.NewMockTimer()
	p, _ := purgatory.New[string, *delayedFetch]("Fetch", purgatory.WithTimer(mt), purgatory.WithoutReaper(),
		purgatory.WithMaxPending(2), purgatory.WithObserver(slowLog{limit: 100 * time.Millisecond}))
	defer p.Shutdown(context.Background())

	log := &partitionLog{}
	fast := newDelayedFetch("fast", log, 0, 10, time.Second)
	slow := newDelayedFetch("slow", log, 0, 1000, 300*time.Millisecond)
	fast.quiet, slow.quiet = true, true
	_, _ = p.TryCompleteElseWatch(fast, "orders-0")
	_, _ = p.TryCompleteElseWatch(slow, "orders-0")
	_, _ = p.TryCompleteElseWatch(newDelayedFetch("third", log, 0, 1, time.Second), "orders-0")

	mt.Advance(50 * time.Millisecond)
	log.bytes = 20
	p.CheckAndComplete("orders-0") // fast completes after 50ms: not slow
	mt.Advance(250 * time.Millisecond)
	// Output:
	// refused: purgatory: too many pending operations
	// slow: expired after 300ms and 2 tries (cause: operation: timed out)
}

// memberSession expires a group member whose heartbeats stop.
type memberSession struct {
	operation.Base
	member string
}

func (s *memberSession) TryComplete() bool { return false }
func (s *memberSession) OnComplete() {
	if cause := s.Cause(); cause != nil {
		fmt.Printf("%s: session ended: %v\n", s.member, cause)
	}
}
func (s *memberSession) OnExpiration() {}

// A session kept alive by heartbeats: each one moves the deadline of the
// one parked operation, rather than completing it and parking another.
func ExamplePurgatory_ResetTimeout() {
	mt := timer.NewMockTimer()
	p, err := purgatory.New[operation.MemberKey, *memberSession]("Heartbeat",
		purgatory.WithTimer(mt), purgatory.WithoutReaper())
	if err != nil {
		panic(err)
	}
	defer p.Shutdown(context.Background())

	const session = 10 * time.Second
	s := &memberSession{member: "consumer-1"}
	s.Init(s, session)
	key := operation.MemberKey{GroupID: "payments", MemberID: s.member}
	if _, err := p.TryCompleteElseWatch(s, key); err != nil {
		panic(err)
	}
	for range 5 { // a heartbeat every 3 s
		mt.Advance(3 * time.Second)
		p.ResetTimeout(s, session)
	}
	fmt.Println("alive after 15 s:", !s.IsCompleted())
	mt.Advance(session) // the heartbeats stop
	fmt.Println("expired:", s.IsExpired())
	// Output:
	// alive after 15 s: true
	// consumer-1: session ended: operation: timed out
	// expired: true
}

// When what requests wait for has gone, answer them all now with the
// reason, rather than at their timeouts.
func ExamplePurgatory_CompleteForKey() {
	p, err := purgatory.New[operation.MemberKey, *memberSession]("Heartbeat",
		purgatory.WithTimer(timer.NewMockTimer()), purgatory.WithoutReaper())
	if err != nil {
		panic(err)
	}
	defer p.Shutdown(context.Background())

	errUnloaded := errors.New("group unloaded")
	key := operation.MemberKey{GroupID: "payments", MemberID: "consumer-1"}
	s := &memberSession{member: key.MemberID}
	s.Init(s, time.Minute)
	if _, err := p.TryCompleteElseWatch(s, key); err != nil {
		panic(err)
	}
	fmt.Println("answered:", p.CompleteForKey(key, errUnloaded))
	fmt.Println("counted:", p.Stats().CompletedForKey)
	// Output:
	// consumer-1: session ended: group unloaded
	// answered: 1
	// counted: 1
}
