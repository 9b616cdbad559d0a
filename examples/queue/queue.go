package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// ErrReceipt is returned for a receipt that holds no message: unknown,
// already deleted, or one whose visibility timeout has passed (the message
// is visible again, and its next receive gets a new receipt).
var ErrReceipt = errors.New("queue: receipt unknown or expired")

// Message is a message as a receive answers it.
type Message struct {
	ID       string `json:"id"`
	Body     string `json:"body"`
	Receipt  string `json:"receipt"`  // deletes it, or changes its visibility, until its visibility timeout
	Receives int    `json:"receives"` // deliveries so far, this one included
}

// service is the queues of one server, on one purgatory and its timer.
// Parked receives are the purgatory's operations, watched by their queue;
// messages' delays and visibility timeouts are tasks on the same timer,
// which the purgatory's reaper advances, and which its Shutdown closes.
// A service is safe for concurrent use.
type service struct {
	p      *purgatory.Purgatory[*queue, *receive]
	timer  timer.Timer // the purgatory's: one clock for receives' waits and messages' timeouts
	closed atomic.Bool // Shutdown has begun: sends are refused

	mu     sync.Mutex // guards queues
	queues map[string]*queue
}

// newService returns a service on t, which the purgatory advances (unless
// opts say WithoutReaper: then the caller does, as a test on a
// timer.MockTimer) and closes at Shutdown.
func newService(t timer.Timer, opts ...purgatory.Option) (*service, error) {
	p, err := purgatory.New[*queue, *receive]("Queue", append(opts, purgatory.WithTimer(t))...)
	if err != nil {
		return nil, err
	}
	return &service{p: p, timer: t, queues: make(map[string]*queue)}, nil
}

// newSystemTimer is the timer a server runs on: the options the purgatory
// gives the timer it makes for itself (expiries on its reaper, 512-bucket
// levels), so that messages' tasks run on the reaper beside the receives'
// timeouts, with no executor goroutine of their own.
func newSystemTimer() (timer.Timer, error) {
	return timer.NewSystemTimer("Queue", timer.WithExecutors(0), timer.WithWheelSize(256))
}

// shutdown answers every parked receive with nothing, refuses sends and
// receives from now on, and stops the timer: delays and visibility
// timeouts stop with it, as they would with the process.
func (s *service) shutdown(ctx context.Context) error {
	s.closed.Store(true)
	return s.p.Shutdown(ctx)
}

// queue returns the queue named name, made on first use, for a request
// that lets go of it with release when it ends. A queue is kept while a
// request holds it or it holds a message (visible, in flight or delayed:
// the timer may still run a message's task); then release drops it, so
// that names used once cost nothing once their messages are gone.
func (s *service) queue(name string) *queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		q = &queue{svc: s, name: name, held: make(map[uint64]*message)}
		s.queues[name] = q
	}
	q.users++
	return q
}

// release lets go of q, taken with queue, and drops it if nothing holds
// it any more. A queue's lock is taken under the service's, never the
// other way round.
func (s *service) release(q *queue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.users--; q.users > 0 {
		return
	}
	q.mu.Lock()
	empty := len(q.visible) == 0 && len(q.held) == 0 && q.delayed == 0
	q.mu.Unlock()
	if empty && s.queues[q.name] == q {
		delete(s.queues, q.name)
	}
}

// A queue's messages are visible (in visible, oldest first), delayed (only
// the timer holds them), or in flight (held, by id, until deleted or their
// visibility timeout passes). Its parked receives are watched by the queue
// itself, a pointer, as the purgatory's key.
type queue struct {
	svc   *service
	name  string
	users int // requests holding it (service.queue); guarded by svc.mu

	// mu guards the fields below and every field of the queue's messages
	// but the timer's. A receive's TryComplete takes it under the
	// receive's lock; it is never held while calling into the purgatory,
	// whose checks run TryCompletes that take it.
	mu      sync.Mutex
	nextID  uint64
	visible []*message
	held    map[uint64]*message
	delayed int
}

type state uint8

const (
	delayed state = iota
	visible
	inFlight
	deleted
)

// message is one message. Its TaskBase is its delay, then each of its
// visibility timeouts in turn: one task, added again for each deadline,
// so a message costs the timer nothing beyond itself.
type message struct {
	timer.TaskBase
	q        *queue
	id       uint64
	body     string
	state    state
	receives int           // its receipt is id.receives
	deadline time.Duration // on the timer's clock: when its delay or visibility timeout ends
}

// Run makes the message visible if its deadline has passed. The deadline,
// not the task's run, decides: a visibility changed while this Run was
// already on its way has moved the deadline and added the task again, and
// this Run then does nothing. A run never comes before the deadline it was
// added for, since the deadline is read from the timer's clock before Add
// reads it again.
func (m *message) Run() {
	q := m.q
	q.mu.Lock()
	woke := q.lapseLocked(m, q.svc.timer.Now())
	q.mu.Unlock()
	if woke {
		q.wake()
	}
}

// lapseLocked makes m visible if it is delayed or in flight and its
// deadline has passed at now, and reports whether it did. The caller holds
// q.mu, and wakes a receiver (q.wake) once it has let go of it.
func (q *queue) lapseLocked(m *message, now time.Duration) bool {
	if now < m.deadline {
		return false
	}
	switch m.state {
	case delayed:
		q.delayed--
	case inFlight:
		delete(q.held, m.id)
	default:
		return false
	}
	m.state = visible
	q.visible = append(q.visible, m)
	return true
}

// wake hands visible messages to parked receives, oldest first, one
// receive at a time, until no message is visible or no receive can take
// one. One at a time, not CheckAndCompleteN(q, k) for k visible: a receive
// may take up to its max, and a check still owed completions after the
// messages ran out would try every other parked receive in vain.
//
// It is called with no lock held: the check runs receives' TryCompletes,
// which take q.mu.
func (q *queue) wake() {
	for q.hasVisible() && q.svc.p.CheckAndCompleteN(q, 1) == 1 {
	}
}

func (q *queue) hasVisible() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.visible) > 0
}

// send adds a message, visible after delay, and returns its id. A message
// visible at once wakes the receive parked longest, if there is one.
// Stored first, woken second: a receive being parked meanwhile either
// takes the message in its own TryComplete or is watched by the time the
// check looks (the purgatory's story about the lock).
func (q *queue) send(body string, delay time.Duration) (string, error) {
	if q.svc.closed.Load() {
		return "", purgatory.ErrShutdown
	}
	q.mu.Lock()
	q.nextID++
	m := &message{q: q, id: q.nextID, body: body}
	if delay > 0 {
		m.state = delayed
		m.deadline = q.svc.timer.Now() + delay
		m.SetDelay(delay)
		if err := q.svc.timer.Add(m); err != nil { // timer.ErrClosed: shutting down
			q.mu.Unlock()
			return "", purgatory.ErrShutdown
		}
		q.delayed++
		q.mu.Unlock()
		return strconv.FormatUint(m.id, 10), nil
	}
	m.state = visible
	q.visible = append(q.visible, m)
	q.mu.Unlock()
	q.wake()
	return strconv.FormatUint(m.id, 10), nil
}

// claim moves up to r.max visible messages, oldest first, in flight for
// r.vis, into r.msgs, and reports whether it moved any.
func (q *queue) claim(r *receive) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(r.max, len(q.visible))
	if n == 0 {
		return false
	}
	now := q.svc.timer.Now()
	r.msgs = make([]Message, n)
	for i, m := range q.visible[:n] {
		q.visible[i] = nil
		m.state = inFlight
		m.receives++
		m.deadline = now + r.vis
		q.held[m.id] = m
		m.SetDelay(r.vis)
		// Add fails only once Shutdown has closed the timer, which
		// stops every timeout anyway.
		_ = q.svc.timer.Add(m)
		r.msgs[i] = Message{ID: strconv.FormatUint(m.id, 10), Body: m.body, Receipt: receipt(m), Receives: m.receives}
	}
	q.visible = q.visible[n:]
	return true
}

func receipt(m *message) string {
	return strconv.FormatUint(m.id, 10) + "." + strconv.Itoa(m.receives)
}

// heldLocked returns the message in flight under receipt, or nil. A
// message whose visibility timeout has passed is made visible here if
// its task has not done so yet, and lapsed reports it: the caller wakes a
// receiver. So whether a receipt still works is decided by the clock
// alone, never by whether the timer's task got to the message first.
func (q *queue) heldLocked(receipt string, now time.Duration) (m *message, lapsed bool) {
	ids, ks, ok := strings.Cut(receipt, ".")
	id, err1 := strconv.ParseUint(ids, 10, 64)
	k, err2 := strconv.Atoi(ks)
	if !ok || err1 != nil || err2 != nil {
		return nil, false
	}
	m = q.held[id]
	if m == nil || m.receives != k {
		return nil, false
	}
	if q.lapseLocked(m, now) {
		return nil, true
	}
	return m, false
}

// delete removes the message in flight under receipt.
func (q *queue) delete(receipt string) error {
	q.mu.Lock()
	m, lapsed := q.heldLocked(receipt, q.svc.timer.Now())
	if m == nil {
		q.mu.Unlock()
		if lapsed {
			q.wake()
		}
		return ErrReceipt
	}
	delete(q.held, m.id)
	m.state = deleted
	// If its Run is already on its way (Cancel false), it finds the
	// message deleted and does nothing.
	m.Cancel()
	q.mu.Unlock()
	return nil
}

// changeVisibility gives the message in flight under receipt a visibility
// timeout of d from now; zero makes it visible at once, and its receipt
// stops working.
func (q *queue) changeVisibility(receipt string, d time.Duration) error {
	q.mu.Lock()
	now := q.svc.timer.Now()
	m, lapsed := q.heldLocked(receipt, now)
	if m == nil {
		q.mu.Unlock()
		if lapsed {
			q.wake()
		}
		return ErrReceipt
	}
	m.deadline = now + max(d, 0)
	if d <= 0 {
		m.Cancel()
		q.lapseLocked(m, now)
		q.mu.Unlock()
		q.wake()
		return nil
	}
	// Adding a pending task again moves it, so no Cancel first. If the
	// old deadline's Run is already on its way, the Add schedules a new
	// one, and the old finds the deadline moved and does nothing.
	m.SetDelay(d)
	_ = q.svc.timer.Add(m)
	q.mu.Unlock()
	return nil
}

// counts reports the queue's messages by state.
func (q *queue) counts() (visible, inFlight, delayed int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.visible), len(q.held), q.delayed
}

// receive is a parked receive: the purgatory's operation, watched by its
// queue. Its TryComplete claims up to max visible messages and completes
// it; its timeout is the receive's wait.
type receive struct {
	operation.Base
	q    *queue
	max  int
	vis  time.Duration
	msgs []Message     // what TryComplete claimed: written before done is closed, read after
	done chan struct{} // closed by OnComplete
}

// TryComplete runs under the receive's lock. Every other way a receive
// completes (its wait's expiry, Shutdown, a hang-up's Complete) takes that
// lock too, so the ForceComplete here cannot lose: messages claimed are
// always answered.
func (r *receive) TryComplete() bool {
	if !r.q.claim(r) {
		return false
	}
	return r.ForceComplete()
}

func (r *receive) OnComplete()   { close(r.done) }
func (r *receive) OnExpiration() {}

// receive waits up to wait for up to most messages of q, each then in
// flight for vis, and returns them: none if the wait or the service ends
// first. If ctx ends first (the client hung up), ok is false and nothing
// was taken: unless a TryComplete had claimed messages already, and then
// they are returned, to be answered as if the client were still there
// (if it is not, their visibility timeout brings them back).
//
// The tempting mistake is to end the receive on a hang-up with
// ForceComplete, which does not wait for a TryComplete under way: the
// TryComplete's own ForceComplete then loses, and the messages it claimed
// are answered to nobody and reach nobody until their visibility timeout.
// Complete waits for it.
func (s *service) receive(ctx context.Context, q *queue, most int, vis, wait time.Duration) (msgs []Message, ok bool, err error) {
	r := &receive{q: q, max: most, vis: vis, done: make(chan struct{})}
	r.Init(r, wait)
	if _, err := s.p.TryCompleteElseWatch(r, q); err != nil {
		return nil, false, err // ErrFull or ErrShutdown: nothing was parked
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if s.p.Complete(r, context.Cause(ctx)) {
			return nil, false, nil
		}
		<-r.done // a TryComplete, the wait's expiry or Shutdown came first
	}
	return r.msgs, true, nil
}
