package purgatory_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// tally is an Observer that counts what it is told, to hold against
// Stats. Each Parked returns a fresh token, which Left must be handed back
// exactly once.
type tally struct {
	parked   atomic.Uint64
	left     [purgatory.Outcomes]atomic.Uint64
	full     atomic.Uint64
	shutdown atomic.Uint64 // refused with ErrShutdown
	maxTime  atomic.Int64
	bad      atomic.Uint64 // a Left without its token, or twice with it
}

type token struct{ left atomic.Bool }

func (y *tally) Parked(purgatory.Park) any {
	y.parked.Add(1)
	return &token{}
}

func (y *tally) Left(state any, d purgatory.Departure) {
	if tok, ok := state.(*token); !ok || tok.left.Swap(true) {
		y.bad.Add(1)
	}
	y.left[d.Outcome].Add(1)
	for m := y.maxTime.Load(); int64(d.Time) > m && !y.maxTime.CompareAndSwap(m, int64(d.Time)); m = y.maxTime.Load() {
	}
}

func (y *tally) Refused(_ purgatory.Park, err error) {
	switch {
	case errors.Is(err, purgatory.ErrFull):
		y.full.Add(1)
	case errors.Is(err, purgatory.ErrShutdown):
		y.shutdown.Add(1)
	default:
		y.bad.Add(1)
	}
}

// timeSum is an Observer that counts the departures and adds up their
// time in purgatory, by outcome: what a time-in-purgatory recorder keeps,
// without the histogram's buckets.
type timeSum struct {
	n   [purgatory.Outcomes]atomic.Uint64
	sum [purgatory.Outcomes]atomic.Int64 // nanoseconds
}

func (*timeSum) Parked(purgatory.Park) any { return nil }

func (s *timeSum) Left(_ any, d purgatory.Departure) {
	s.n[d.Outcome].Add(1)
	s.sum[d.Outcome].Add(int64(d.Time))
}

func (*timeSum) Refused(purgatory.Park, error) {}

// checkTally checks, once nothing is in flight, that y was told of every
// departure that st counts, each once, under the outcome st counts it
// in, and of every ErrFull refusal. early is how many operations more than
// Stats counts y may have been told of as parked and left early: those
// force-completed while TryCompleteElseWatch was parking them, which it
// refuses (ErrAlreadyWatched) and Stats never counts.
func checkTally(t testing.TB, st purgatory.Stats, y *tally, early uint64) {
	t.Helper()
	assert.Zero(t, y.bad.Load(), "departures without their park's state, or told twice")
	extra := y.left[purgatory.OutcomeEarly].Load() - st.CompletedEarly
	assert.LessOrEqual(t, extra, early, "told of early departures Stats does not count")
	for k, want := range map[purgatory.Outcome]uint64{
		purgatory.OutcomeExpired:   st.Expired,
		purgatory.OutcomeContext:   st.ContextDone,
		purgatory.OutcomeShutdown:  st.Shutdown,
		purgatory.OutcomeForKey:    st.CompletedForKey,
		purgatory.OutcomeCancelled: st.Cancelled,
	} {
		assert.Equal(t, want, y.left[k].Load(), "departures %v", k)
	}
	var left uint64
	for k := range y.left {
		left += y.left[k].Load()
	}
	assert.Equal(t, y.parked.Load(), left+uint64(st.Pending), "every park told is pending or has left")
	assert.Equal(t, st.Full, y.full.Load(), "refusals with ErrFull")
}

// event is one call of a recorder.
type event struct {
	call  string // parked, left or refused
	park  purgatory.Park
	state any
	dep   purgatory.Departure
	err   error
}

// recorder is an Observer that records every call, in order, under a
// name; Parked returns the name and the number of its park, to check
// that Left gets it back.
type recorder struct {
	name   string
	mu     *sync.Mutex // shared by recorders whose relative order is checked
	log    *[]string
	events []event
	parks  int
}

type recState struct {
	name string
	n    int
}

func newRecorder(name string, mu *sync.Mutex, log *[]string) *recorder {
	return &recorder{name: name, mu: mu, log: log}
}

func (r *recorder) Parked(p purgatory.Park) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parks++
	*r.log = append(*r.log, r.name+" parked")
	r.events = append(r.events, event{call: "parked", park: p})
	return recState{r.name, r.parks}
}

func (r *recorder) Left(state any, d purgatory.Departure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.log = append(*r.log, r.name+" left "+d.Outcome.String())
	r.events = append(r.events, event{call: "left", state: state, dep: d})
}

func (r *recorder) Refused(p purgatory.Park, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.log = append(*r.log, r.name+" refused")
	r.events = append(r.events, event{call: "refused", park: p, err: err})
}

type ctxKey struct{}

// An observer is told of each way an operation can leave, with the
// operation's context, its keys, the state its Parked returned, the
// outcome, the cause its Cause reports, the exact time on the MockTimer's
// clock and the TryComplete calls made; and of refusals for ErrFull and
// after Shutdown, but not of misuse.
func TestObserverIsToldEveryOutcome(t *testing.T) {
	var mu sync.Mutex
	var log []string
	r := newRecorder("r", &mu, &log)
	p, mt := newMockPurgatory(t, purgatory.WithObserver(r), purgatory.WithMaxPending(6))
	errMoved := errors.New("moved")

	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "request-7"))
	defer cancel()
	early, expired := newOp(time.Hour), newOp(40*time.Millisecond)
	byCtx := newOp(time.Hour, operation.WithContext(ctx))
	forKey, cancelled, atShutdown := newOp(time.Hour), newOp(time.Hour), newOp(time.Hour)
	mustPark(t, p, early, "a", "b")
	mustPark(t, p, expired, "c")
	mustPark(t, p, byCtx, "d")
	mustPark(t, p, forKey, "e")
	mustPark(t, p, cancelled, "f")
	mustPark(t, p, atShutdown, "g")
	_, err := p.TryCompleteElseWatch(newOp(time.Hour), "h")
	require.ErrorIs(t, err, purgatory.ErrFull)
	_, err = p.TryCompleteElseWatch(newOp(time.Hour))
	require.ErrorIs(t, err, purgatory.ErrNoKeys, "misuse is not reported")

	mt.Advance(10 * time.Millisecond)
	p.CheckAndComplete("a") // early tried twice now
	early.Ready.Store(true)
	require.Equal(t, 1, p.CheckAndComplete("b")) // and completed by the third
	mt.Advance(30 * time.Millisecond)            // expired at 40ms
	require.Equal(t, int32(1), expired.Expiries.Load())
	cancel() // on the context's goroutine
	// OnComplete runs after Left: once it has, the observer has been told.
	require.Eventually(t, func() bool { return byCtx.Completes.Load() == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 1, p.CompleteForKey("e", errMoved))
	require.Len(t, p.CancelForKey("f"), 1)
	mt.Advance(5 * time.Millisecond)
	require.NoError(t, p.Shutdown(context.Background()))
	_, err = p.TryCompleteElseWatch(newOp(time.Hour), "h")
	require.ErrorIs(t, err, purgatory.ErrShutdown)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, r.events, 6+1+6+1, "6 parks, a refusal, 6 departures, a refusal")
	for i, op := range []*mockOp{early, expired, byCtx, forKey, cancelled, atShutdown} {
		e := r.events[i]
		require.Equal(t, "parked", e.call)
		assert.Same(t, op, e.park.Operation)
		assert.NotNil(t, e.park.Context)
	}
	assert.Equal(t, 2, r.events[0].park.Keys)
	assert.Equal(t, "request-7", r.events[2].park.Context.Value(ctxKey{}), "the operation's own context")
	assert.Equal(t, context.Background(), r.events[0].park.Context, "none given: Background")
	assert.Equal(t, "refused", r.events[6].call)
	assert.ErrorIs(t, r.events[6].err, purgatory.ErrFull)
	assert.Equal(t, 1, r.events[6].park.Keys)

	type dep struct {
		state   recState
		outcome purgatory.Outcome
		time    time.Duration
		tries   int
	}
	var got []dep
	var causes []error
	for _, e := range r.events[7:13] {
		require.Equal(t, "left", e.call)
		got = append(got, dep{e.state.(recState), e.dep.Outcome, e.dep.Time, e.dep.Tries})
		causes = append(causes, e.dep.Cause)
	}
	assert.Equal(t, []dep{
		{recState{"r", 1}, purgatory.OutcomeEarly, 10 * time.Millisecond, 3},
		{recState{"r", 2}, purgatory.OutcomeExpired, 40 * time.Millisecond, 1},
		{recState{"r", 3}, purgatory.OutcomeContext, 40 * time.Millisecond, 1},
		{recState{"r", 4}, purgatory.OutcomeForKey, 40 * time.Millisecond, 1},
		{recState{"r", 5}, purgatory.OutcomeCancelled, 40 * time.Millisecond, 1},
		{recState{"r", 6}, purgatory.OutcomeShutdown, 45 * time.Millisecond, 1},
	}, got)
	assert.Equal(t, []error{nil, operation.ErrExpired, context.Canceled, errMoved, nil, purgatory.ErrShutdown}, causes)
	assert.Equal(t, "refused", r.events[13].call)
	assert.ErrorIs(t, r.events[13].err, purgatory.ErrShutdown)
}

// With several observers each is told of every event once, in the order
// they were given, with its own state; an observer that keeps none beside
// one that does gets nil back.
func TestObserversAreToldInOrder(t *testing.T) {
	var mu sync.Mutex
	var log []string
	a, b := newRecorder("a", &mu, &log), newRecorder("b", &mu, &log)
	var none stateless
	p, _ := newMockPurgatory(t, purgatory.WithObserver(a), purgatory.WithObserver(&none), purgatory.WithObserver(b))
	op := newOp(time.Hour)
	mustPark(t, p, op, "k")
	op.ForceComplete()
	assert.Equal(t, []string{"a parked", "b parked", "a left early", "b left early"}, log)
	assert.Equal(t, recState{"a", 1}, a.events[1].state)
	assert.Equal(t, recState{"b", 1}, b.events[1].state)
	assert.Equal(t, []any{nil}, none.states)
}

// stateless keeps no state, and records what Left is handed.
type stateless struct{ states []any }

func (*stateless) Parked(purgatory.Park) any               { return nil }
func (s *stateless) Left(state any, _ purgatory.Departure) { s.states = append(s.states, state) }
func (*stateless) Refused(purgatory.Park, error)           {}

// panicky panics in every callback.
type panicky struct{}

func (panicky) Parked(purgatory.Park) any     { panic("test: Parked panics") }
func (panicky) Left(any, purgatory.Departure) { panic("test: Left panics") }
func (panicky) Refused(purgatory.Park, error) { panic("test: Refused panics") }

// A panicking observer is a bug in it, not in the operation: the
// operation parks, completes and runs OnComplete as ever, and each panic
// is counted and logged.
func TestObserverPanicsAreRecovered(t *testing.T) {
	p, mt := newMockPurgatory(t, purgatory.WithObserver(panicky{}), purgatory.WithMaxPending(1),
		purgatory.WithLogger(slog.New(slog.DiscardHandler)))
	op := newOp(10 * time.Millisecond)
	mustPark(t, p, op, "k")
	_, err := p.TryCompleteElseWatch(newOp(time.Hour), "k")
	require.ErrorIs(t, err, purgatory.ErrFull)
	mt.Advance(10 * time.Millisecond)
	assert.Equal(t, int32(1), op.Completes.Load())
	assert.Equal(t, int32(1), op.Expiries.Load())
	st := p.Stats()
	assert.Equal(t, uint64(1), st.Expired)
	assert.Equal(t, uint64(3), st.Panics, "Parked, Refused and Left")
}

// A nil observer is refused when the purgatory is made.
func TestWithObserverRefusesNil(t *testing.T) {
	_, err := purgatory.New[string, *mockOp]("nil", purgatory.WithObserver(nil))
	assert.ErrorIs(t, err, purgatory.ErrInvalidOption)
	var typed *tally
	_, err = purgatory.New[string, *mockOp]("nil", purgatory.WithObserver(typed))
	assert.ErrorIs(t, err, purgatory.ErrInvalidOption)
}

// countingClock is a MockTimer whose clock counts its readings.
type countingClock struct {
	*timer.MockTimer
	reads atomic.Int64
}

func (c *countingClock) Now() time.Duration {
	c.reads.Add(1)
	return c.MockTimer.Now()
}

// Without an observer no clock is read on the request path (timeouts too
// short to be held back need none); with one, a park and a departure
// read it once each.
func TestObserverIsTheOnlyClockReader(t *testing.T) {
	for _, observed := range []bool{false, true} {
		c := &countingClock{MockTimer: timer.NewMockTimer()}
		opts := []purgatory.Option{purgatory.WithTimer(c), purgatory.WithoutReaper()}
		if observed {
			opts = append(opts, purgatory.WithObserver(&stateless{}))
		}
		p, err := purgatory.New[string, *mockOp]("clock", opts...)
		require.NoError(t, err)
		for range 10 {
			op := newOp(100 * time.Millisecond)
			mustPark(t, p, op, "a", "b")
			op.Ready.Store(true)
			require.Equal(t, 1, p.CheckAndComplete("b"))
		}
		want := int64(0)
		if observed {
			want = 20
		}
		assert.Equal(t, want, c.reads.Load(), "observed: %v", observed)
		require.NoError(t, p.Shutdown(context.Background()))
	}
}

// An operation whose context never ends but carries values (a span, for
// an observer) is not armed, and its context still reaches the observer.
func TestContextThatNeverEndsReachesTheObserver(t *testing.T) {
	var mu sync.Mutex
	var log []string
	r := newRecorder("r", &mu, &log)
	p, _ := newMockPurgatory(t, purgatory.WithObserver(r))
	op := newOp(time.Hour, operation.WithContext(context.WithValue(context.Background(), ctxKey{}, "v")))
	mustPark(t, p, op, "k")
	assert.Equal(t, "v", r.events[0].park.Context.Value(ctxKey{}))
	op.ForceComplete()
	assert.Equal(t, purgatory.OutcomeEarly, r.events[1].dep.Outcome)
}

// Outcome names are the exporters' label values, and follow the
// lifecycle's kinds one for one.
func TestOutcomeNames(t *testing.T) {
	var names []string
	for k := range purgatory.Outcome(purgatory.Outcomes) {
		names = append(names, k.String())
	}
	assert.Equal(t, []string{"early", "expired", "context", "shutdown", "for_key", "cancelled"}, names)
	assert.Equal(t, "Outcome(9)", purgatory.Outcome(9).String())
}
