package operation_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// delayedProduce waits until the replicas have reached its offset.
type delayedProduce struct {
	operation.Base
	required int64
	replicas *replicaState
	reply    chan<- string // buffered: OnComplete must not block
}

type replicaState struct {
	mu sync.Mutex
	hw int64 // high watermark
}

func (r *replicaState) highWatermark() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hw
}

// TryComplete runs under the operation's lock.
func (p *delayedProduce) TryComplete() bool {
	if p.replicas.highWatermark() >= p.required {
		return p.ForceComplete()
	}
	return false
}

// OnComplete runs once; Cause tells a timeout from success.
func (p *delayedProduce) OnComplete() {
	if errors.Is(p.Cause(), operation.ErrExpired) {
		p.reply <- "REQUEST_TIMED_OUT"
		return
	}
	p.reply <- "NONE"
}

func (p *delayedProduce) OnExpiration() {}

// Writing an operation: embed Base, say when it can complete, answer once.
func Example() {
	mt := timer.NewMockTimer() // time moves only when the example says so
	p, _ := purgatory.New[operation.TopicPartitionKey, *delayedProduce]("Produce",
		purgatory.WithTimer(mt), purgatory.WithoutReaper())
	defer p.Shutdown(context.Background())

	tp := operation.TopicPartitionKey{Topic: "orders", Partition: 0}
	replicas := &replicaState{}
	reply := make(chan string, 2)
	for _, required := range []int64{10, 99} {
		op := &delayedProduce{required: required, replicas: replicas, reply: reply}
		op.Init(op, 500*time.Millisecond)
		_, _ = p.TryCompleteElseWatch(op, tp)
	}

	// The followers reach offset 10; the request that changed the key
	// checks it, with no lock of its own held.
	replicas.mu.Lock()
	replicas.hw = 10
	replicas.mu.Unlock()
	p.CheckAndComplete(tp)
	fmt.Println("first:", <-reply)

	mt.Advance(500 * time.Millisecond)
	fmt.Println("second:", <-reply)
	// Output:
	// first: NONE
	// second: REQUEST_TIMED_OUT
}

// A long poll in an HTTP handler, with no operation type of its own: the
// handler parks a Func until a message arrives, its timeout passes, or the
// client goes away (the request's context).
func ExampleNewFunc() {
	p, _ := purgatory.New[string, *operation.Func]("poll")
	defer p.Shutdown(context.Background())

	var mu sync.Mutex
	inbox := map[string][]string{}

	poll := func(w http.ResponseWriter, r *http.Request) {
		topic := r.URL.Query().Get("topic")
		reply := make(chan string, 1) // the answer must not block
		ready := func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(inbox[topic]) > 0
		}
		answer := func(cause error) {
			if cause != nil {
				reply <- "no message: " + cause.Error()
				return
			}
			mu.Lock()
			defer mu.Unlock()
			reply <- inbox[topic][0]
		}
		op := operation.NewFunc(5*time.Second, ready, answer, operation.WithContext(r.Context()))
		if _, err := p.TryCompleteElseWatch(op, topic); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, <-reply)
	}
	srv := httptest.NewServer(http.HandlerFunc(poll))
	defer srv.Close()

	got := make(chan string)
	go func() {
		resp, err := http.Get(srv.URL + "?topic=news")
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	for p.NumDelayed() == 0 { // wait until the poll is parked
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	inbox["news"] = append(inbox["news"], "hello")
	mu.Unlock()
	p.CheckAndComplete("news")
	fmt.Println(<-got)
	// Output:
	// hello
}

// Operations that must not interleave share a lock (Kafka's lockOpt): a
// group's join and sync, say. With a SharedLock, a callback running under
// the lock may check the other operations that share it; the check runs as
// the lock is released.
func ExampleWithLock() {
	p, _ := purgatory.New[operation.GroupJoinKey, *operation.Func]("Rebalance", purgatory.WithoutTimer())
	defer p.Shutdown(context.Background())

	var group operation.SharedLock
	key := operation.GroupJoinKey{GroupID: "g"}
	joined := false
	join := operation.NewFunc(time.Minute, func() bool { return true }, func(error) {
		fmt.Println("join answered")
		joined = true // the group's state, guarded by the shared lock
		p.CheckAndComplete(key)
	}, operation.WithLock(&group))
	syncOp := operation.NewFunc(time.Minute, func() bool { return joined }, func(error) {
		fmt.Println("sync answered")
	}, operation.WithLock(&group))

	_, _ = p.TryCompleteElseWatch(syncOp, key)
	_, _ = p.TryCompleteElseWatch(join, key)
	fmt.Println("pending:", p.NumDelayed())
	// Output:
	// join answered
	// sync answered
	// pending: 0
}

// An operation tied to a context completes when the context ends: its
// Cause is the context's, and OnExpiration does not run.
func ExampleWithContext() {
	p, _ := purgatory.New[string, *operation.Func]("requests")
	defer p.Shutdown(context.Background())

	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	op := operation.NewFunc(time.Minute, nil, func(cause error) { done <- cause }, operation.WithContext(ctx))
	_, _ = p.TryCompleteElseWatch(op, "k")

	cancel(errors.New("client went away"))
	fmt.Println(<-done)
	fmt.Println("expired:", op.IsExpired())
	// Output:
	// client went away
	// expired: false
}

// Cause, read in OnComplete (or after), says how the operation ended.
func ExampleBase_Cause() {
	mt := timer.NewMockTimer()
	p, _ := purgatory.New[string, *operation.Func]("causes", purgatory.WithTimer(mt), purgatory.WithoutReaper())

	show := func(name string) func(error) {
		return func(cause error) { fmt.Printf("%s: %v\n", name, cause) }
	}
	early := operation.NewFunc(time.Second, nil, show("early"))
	timedOut := operation.NewFunc(time.Second, nil, show("timed out"))
	atShutdown := operation.NewFunc(time.Hour, nil, show("at shutdown"))
	for _, op := range []*operation.Func{early, timedOut, atShutdown} {
		_, _ = p.TryCompleteElseWatch(op, "k")
	}
	early.ForceComplete()
	mt.Advance(time.Second)
	_ = p.Shutdown(context.Background())
	// Output:
	// early: <nil>
	// timed out: operation: timed out
	// at shutdown: purgatory: shut down
}
