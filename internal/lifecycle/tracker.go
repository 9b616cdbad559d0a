package lifecycle

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/purgatory-go/purgatory/internal/core"
)

// Tracker counts what a purgatory's operations report. The counters are
// striped by operation address, and within a stripe what a park writes is
// on another cache line than what a completion writes: a request is
// usually parked on one goroutine and completed on another, and with
// shared counters every request would bounce their lines between two
// cores. Reads sum the stripes.
type Tracker struct {
	stripes [trackerStripes]trackerStripe

	// OnPanic is called with every recovered callback panic. Set it before
	// the Tracker is used.
	OnPanic func(op any, callback string, v any)

	// OnMisuse is called once, with the operation, the first time a
	// TryComplete reports true without completing its operation (which
	// is then completed for it). Set it before the Tracker is used.
	OnMisuse func(op any)
	misused  atomic.Bool

	// MaxPending, when above zero, bounds the operations parked at once;
	// reserved counts them. Only purgatories given WithMaxPending pay for
	// the shared counter.
	MaxPending int64
	reserved   atomic.Int64

	// Obs, if set, is told of every park and departure, and a park then
	// gives each operation a meta of its own to keep what Obs needs.
	// Nil, nothing is read or written for it beyond this field. Set it
	// before the Tracker is used.
	Obs Observer

	// Hooks are points between two steps where a test runs a competitor.
	// Nil outside tests; set it before the Tracker is used.
	Hooks *Hooks

	// Core is the engine of the purgatory's timer if it is a timer of
	// package timer, whose buckets' slots are the operations' Handles;
	// nil otherwise, and a park gives each operation a Handle of its own.
	// Set it before the Tracker is used.
	Core *core.Timer

	// thin is the meta of the operations that have nothing of their own
	// (thinMeta).
	thin meta

	// causes keeps, for the few causes Complete is given, a copy of each
	// and a meta that carries it (causeFor).
	causes causeCache
}

// causeCache holds up to maxCauses causes with, for each, a pointer to a
// copy (what a meta's cause holds) and a meta of its own that carries it,
// which operations with nothing of their own share once completed with
// that cause. A service ends hung-up requests with one or two sentinel
// errors; storing one per operation would allocate at every hang-up.
// Causes past maxCauses, and causes that cannot be compared, are not
// kept: each completion with one allocates, as it did before the cache.
type causeCache struct {
	mu sync.Mutex
	n  int
	c  [maxCauses]cachedCause
}

type cachedCause struct {
	err error
	p   *error
	m   *meta
}

const maxCauses = 8

// causeFor returns a pointer to a copy of cause and a shared meta that
// carries it, from the cache, or a new pointer and a nil meta.
func (t *Tracker) causeFor(cause error) (*error, *meta) {
	if cause != nil && !reflect.TypeOf(cause).Comparable() {
		return newCause(cause), nil
	}
	cc := &t.causes
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for i := range cc.c[:cc.n] {
		if c := &cc.c[i]; c.err == cause {
			return c.p, c.m
		}
	}
	p := newCause(cause)
	if cc.n == maxCauses {
		return p, nil
	}
	m := &meta{own: true, shared: true}
	m.t.Store(t)
	m.cause.Store(p)
	cc.c[cc.n] = cachedCause{cause, p, m}
	cc.n++
	return p, m
}

// newCause returns a pointer to a copy of cause. (Taking the address of
// causeFor's parameter would move it to the heap at every call.)
func newCause(cause error) *error { return &cause }

// thinMeta returns the meta the Tracker's operations share, which the
// first park binds to it.
func (t *Tracker) thinMeta() *meta {
	if t.thin.t.Load() == nil {
		t.thin.t.CompareAndSwap(nil, t)
	}
	return &t.thin
}

// Observer is what a Tracker tells of its operations' parks and
// departures. Package purgatory implements it over the user's Observers.
type Observer interface {
	// Now reads the clock that times the stay in purgatory. Park's now
	// must be a reading of it.
	Now() int64
	// Parked is told of o's park before the park is published, under o's
	// lock (or, for a park deferred to the holder of o's SharedLock, under
	// that lock's pmu), so that nothing can complete o before it returns:
	// what it returns is kept in o's meta and given to Left. ctx is the
	// context given to Init, or nil.
	Parked(o *Op, ctx context.Context, keys int) any
	// Left is told, once for each Parked, that o left as k (Cancelled for
	// a cancel): state is what Parked returned, parked and end the clock
	// readings of the park and the departure, tries the TryComplete calls
	// made on o since its park. It runs before o's OnComplete.
	Left(o *Op, k Outcome, state any, parked, end int64, tries uint32)
}

const trackerStripes = 16

type trackerStripe struct {
	parkCounts
	_ [128 - unsafe.Sizeof(parkCounts{})%128]byte
	leaveCounts
	_ [128 - unsafe.Sizeof(leaveCounts{})%128]byte
}

// parkCounts are written where operations are parked and watched.
type parkCounts struct {
	arrived atomic.Uint64 // parks, less those whose CAS failed, and their watch entries (counts)
}

// leaveCounts are written where operations complete or are cancelled. On
// a line of their own: a request parked on one core and completed on
// another would otherwise take this line from the other core twice.
type leaveCounts struct {
	left      atomic.Uint64              // parked operations that completed or were cancelled, and their watch entries (counts)
	done      [Completions]atomic.Uint64 // completed, by Outcome
	cancelled atomic.Uint64
	panics    atomic.Uint64
}

func (t *Tracker) stripe(o *Op) *trackerStripe {
	return &t.stripes[(uintptr(unsafe.Pointer(o))>>7)%trackerStripes]
}

// Counts is a sum of a Tracker's stripes.
type Counts struct {
	Pending, Watched int64
	Done             [Completions]uint64 // by Outcome
	Cancelled        uint64
	Panics           uint64
}

// Counts sums the stripes. Each counter is read atomically; the sum is not
// one snapshot.
func (t *Tracker) Counts() Counts {
	var c Counts
	c.Pending, c.Watched = t.Live()
	for i := range t.stripes {
		s := &t.stripes[i]
		for k := range c.Done {
			c.Done[k] += s.done[k].Load()
		}
		c.Cancelled += s.cancelled.Load()
		c.Panics += s.panics.Load()
	}
	return c
}

// Hooks are called between two steps of a transition that another
// goroutine may act between. Each may be nil.
type Hooks struct {
	// Published runs in a park (Park, or DeferPark) once its meta, and
	// with it the Tracker, is published, before the compare-and-swap that
	// parks the operation or records its deferral.
	Published func(o *Op)
	// Registered runs in ArmContext once the context's AfterFunc is
	// registered, before its stop function is stored.
	Registered func(o *Op)
	// Contended runs when a goroutine is about to wait for a parked
	// operation's own lock.
	Contended func(o *Op)
	// Live runs between Live's two passes.
	Live func()
	// Claimed runs in an expiry by the timer once it has found the entry
	// fired and the operation pending, before it takes the entry's
	// add-lock to decide.
	Claimed func(o *Op)
	// Deciding runs in that expiry holding the entry's add-lock, just
	// before its completing swap.
	Deciding func(o *Op)
	// CauseStored runs in CompleteWith once the cause is stored, before
	// the completing swap.
	CauseStored func(o *Op)
}

// Live sums the pending operations and their watch entries. It reads what
// left before what arrived, so that an operation that parks and leaves
// while it sums is counted in neither or in arrived alone. An arrival is
// counted once the operation's timeout is in the timer (Arrived), and a
// completion may come first: either figure may then be briefly below zero,
// and callers clamp it. At rest both are exact.
func (t *Tracker) Live() (pending, watched int64) {
	var d uint64
	for i := range t.stripes {
		d -= t.stripes[i].left.Load()
	}
	if t.Hooks != nil && t.Hooks.Live != nil {
		t.Hooks.Live()
	}
	for i := range t.stripes {
		d += t.stripes[i].arrived.Load()
	}
	// d is pending + watched<<32, each a small signed figure: take the
	// low half as signed, and its borrow back out of the high half.
	p := int64(int32(uint32(d)))
	return p, int64(int32((d - uint64(p)) >> 32))
}

// counts packs one parked operation and its n watch entries into the
// word that arrived and left count in: operations in the low 32 bits,
// entries in the high 32. One locked add then counts both. The sums wrap,
// and their difference is still exact while fewer than 2^32 operations
// are pending and fewer than 2^32 entries watched, which no heap holds.
func counts(n uint32) uint64 { return 1 | uint64(n)<<32 }

// AddPanic counts a panic recovered outside the operations' own callbacks.
func (t *Tracker) AddPanic() { t.stripes[0].panics.Add(1) }

// Reserve takes a place for one more pending operation, and reports false
// if MaxPending are pending already.
func (t *Tracker) Reserve() bool {
	if t.MaxPending <= 0 {
		return true
	}
	if t.reserved.Add(1) > t.MaxPending {
		t.reserved.Add(-1)
		return false
	}
	return true
}

func (t *Tracker) release() {
	if t.MaxPending > 0 {
		t.reserved.Add(-1)
	}
}

func (t *Tracker) recovered(o *Op, callback string, v any) {
	t.stripe(o).panics.Add(1)
	if t.OnPanic != nil {
		t.OnPanic(Self(o), callback, v)
	}
}
