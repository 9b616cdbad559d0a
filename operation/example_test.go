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

// longPoll is an HTTP handler's request: it completes when a message is
// waiting for its topic, and hands its Cause to the handler. A handler's
// operation needs no more than this.
type longPoll struct {
	operation.Base
	waiting func() bool // under the operation's lock
	done    chan error  // buffered 1: OnComplete must not block
}

func (l *longPoll) TryComplete() bool {
	if l.waiting() {
		return l.ForceComplete()
	}
	return false
}

func (l *longPoll) OnComplete()   { l.done <- l.Cause() }
func (l *longPoll) OnExpiration() {}

// A long poll in an HTTP handler: the handler parks its request until a
// message arrives, its timeout passes, or the client goes away (the
// request's context).
func Example_longPoll() {
	p, _ := purgatory.New[string, *longPoll]("poll")
	defer p.Shutdown(context.Background())

	var mu sync.Mutex
	inbox := map[string][]string{}

	poll := func(w http.ResponseWriter, r *http.Request) {
		topic := r.URL.Query().Get("topic")
		op := &longPoll{done: make(chan error, 1), waiting: func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(inbox[topic]) > 0
		}}
		op.Init(op, 5*time.Second, operation.WithContext(r.Context()))
		if _, err := p.TryCompleteElseWatch(op, topic); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if cause := <-op.done; cause != nil {
			fmt.Fprint(w, "no message: "+cause.Error())
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprint(w, inbox[topic][0])
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

// groupOp is one of a group's requests (a join, a sync): it completes once
// ready reports true, and then runs answer.
type groupOp struct {
	operation.Base
	ready  func() bool // under the group's shared lock
	answer func()
}

func (g *groupOp) TryComplete() bool {
	if g.ready() {
		return g.ForceComplete()
	}
	return false
}

func (g *groupOp) OnComplete()   { g.answer() }
func (g *groupOp) OnExpiration() {}

// Operations that must not interleave share a lock (Kafka's lockOpt): a
// group's join and sync, say. With a SharedLock, a callback running under
// the lock may check the other operations that share it; the check runs as
// the lock is released.
func ExampleWithLock() {
	p, _ := purgatory.New[operation.GroupJoinKey, *groupOp]("Rebalance", purgatory.WithoutTimer())
	defer p.Shutdown(context.Background())

	var group operation.SharedLock
	key := operation.GroupJoinKey{GroupID: "g"}
	joined := false
	join := &groupOp{ready: func() bool { return true }, answer: func() {
		fmt.Println("join answered")
		joined = true // the group's state, guarded by the shared lock
		p.CheckAndComplete(key)
	}}
	join.Init(join, time.Minute, operation.WithLock(&group))
	syncOp := &groupOp{ready: func() bool { return joined }, answer: func() {
		fmt.Println("sync answered")
	}}
	syncOp.Init(syncOp, time.Minute, operation.WithLock(&group))

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
	p, _ := purgatory.New[string, *longPoll]("requests")
	defer p.Shutdown(context.Background())

	ctx, cancel := context.WithCancelCause(context.Background())
	op := &longPoll{waiting: func() bool { return false }, done: make(chan error, 1)}
	op.Init(op, time.Minute, operation.WithContext(ctx))
	_, _ = p.TryCompleteElseWatch(op, "k")

	cancel(errors.New("client went away"))
	fmt.Println(<-op.done)
	fmt.Println("expired:", op.IsExpired())
	// Output:
	// client went away
	// expired: false
}

// reporter completes only by its timeout, a ForceComplete or a shutdown,
// and prints its Cause under its name.
type reporter struct {
	operation.Base
	name string
}

func newReporter(name string, timeout time.Duration) *reporter {
	r := &reporter{name: name}
	r.Init(r, timeout)
	return r
}

func (r *reporter) TryComplete() bool { return false }
func (r *reporter) OnComplete()       { fmt.Printf("%s: %v\n", r.name, r.Cause()) }
func (r *reporter) OnExpiration()     {}

// Cause, read in OnComplete (or after), says how the operation ended.
func ExampleBase_Cause() {
	mt := timer.NewMockTimer()
	p, _ := purgatory.New[string, *reporter]("causes", purgatory.WithTimer(mt), purgatory.WithoutReaper())

	early := newReporter("early", time.Second)
	timedOut := newReporter("timed out", time.Second)
	atShutdown := newReporter("at shutdown", time.Hour)
	for _, op := range []*reporter{early, timedOut, atShutdown} {
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
