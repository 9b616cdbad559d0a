package core

import (
	"sync"
)

// executor runs expired tasks on a fixed set of goroutines, like the
// single-thread executor of Kafka's SystemTimer. Its queue is unbounded, so
// handing tasks over never blocks the goroutine advancing the clock; tasks
// are handed over in batches, one lock per AdvanceClock rather than one per
// task.
type executor struct {
	mu      sync.Mutex
	cond    sync.Cond
	queue   []expiry // guarded by mu
	closed  bool     // guarded by mu
	workers int
	run     func(expiry)
	wg      sync.WaitGroup
}

func newExecutor(workers int, run func(expiry)) *executor {
	x := &executor{workers: workers, run: run}
	x.cond.L = &x.mu
	x.wg.Add(workers)
	for range workers {
		go x.loop()
	}
	return x
}

// submit queues tasks for the workers. After close it runs them on the
// caller instead: a task that fired must run, and a turn that collected it
// just before Close would otherwise hand it to workers that have exited.
func (x *executor) submit(tasks ...expiry) {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		for _, t := range tasks {
			x.run(t)
		}
		return
	}
	wasEmpty := len(x.queue) == 0
	x.queue = append(x.queue, tasks...)
	x.mu.Unlock()
	if !wasEmpty {
		return // the workers are awake already
	}
	if len(tasks) > 1 && x.workers > 1 {
		x.cond.Broadcast()
	} else {
		x.cond.Signal()
	}
}

// loop takes a share of the queue at a time, swapping slices so that the
// steady state allocates nothing.
func (x *executor) loop() {
	defer x.wg.Done()
	var spare []expiry
	for {
		x.mu.Lock()
		for len(x.queue) == 0 && !x.closed {
			x.cond.Wait()
		}
		if len(x.queue) == 0 {
			x.mu.Unlock()
			return
		}
		var batch []expiry
		if n := len(x.queue); x.workers == 1 || n <= 64 {
			batch, x.queue = x.queue, spare[:0]
		} else {
			// Leave the rest for the other workers.
			take := max(64, n/x.workers)
			batch = append(spare[:0], x.queue[:take]...)
			rest := copy(x.queue, x.queue[take:])
			clear(x.queue[rest:])
			x.queue = x.queue[:rest]
			x.cond.Signal()
		}
		x.mu.Unlock()
		for _, t := range batch {
			x.run(t)
		}
		clear(batch)
		spare = batch[:0]
	}
}

// close runs what is queued, then stops the workers and waits for them.
func (x *executor) close() {
	x.mu.Lock()
	x.closed = true
	x.mu.Unlock()
	x.cond.Broadcast()
	x.wg.Wait()
}
