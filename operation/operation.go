package operation

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
)

// DelayedOperation is a request that waits until it can complete or its
// timeout passes. Implement it by embedding [Base] in a struct, providing
// TryComplete, OnComplete and OnExpiration, and calling Init once.
//
// The interface is sealed: only types that embed Base implement it, so
// every operation carries the bookkeeping the purgatory needs. Nothing else
// of the operation's method set is consulted: a method of your own named
// Run, say, has no effect on the operation's timeout.
type DelayedOperation interface {
	// TryComplete checks whether the operation can finish now. If it can,
	// it returns ForceComplete(); otherwise false. The purgatory calls it
	// with the operation's lock held.
	TryComplete() bool

	// OnComplete finishes the operation: it runs exactly once, from
	// whichever completion won. Cause tells why.
	OnComplete()

	// OnExpiration runs after OnComplete when the timeout (or the
	// purgatory's Shutdown) completed the operation.
	OnExpiration()

	// ForceComplete and IsCompleted come from Base.
	ForceComplete() bool
	IsCompleted() bool

	sealed
}

type sealed = lifecycle.Sealed

// ErrExpired is the Cause of an operation its timeout completed. Check it
// with [errors.Is]. The other causes are purgatory.ErrShutdown, a
// context's cause (WithContext) and CompleteForKey's.
var ErrExpired = errors.New("operation: timed out")

// Base gives a DelayedOperation Kafka's semantics. Embed it and call Init
// once, before the operation is used:
//
//	type delayedFetch struct {
//		operation.Base
//		...
//	}
//	f := &delayedFetch{...}
//	f.Init(f, maxWait)
//
// The zero Base is not ready: a purgatory refuses it with
// purgatory.ErrNotInitialised.
// A Base must not be copied after Init.
type Base struct {
	state
}

type state = lifecycle.Op

func (b *Base) op() *lifecycle.Op { return &b.state }

// InitOption configures Init.
type InitOption interface{ initOption() }

// Options are concrete values rather than functions applied to a config,
// so that Init allocates nothing for an operation without any: it runs once
// per request.
type lockOption struct{ lock sync.Locker }

func (lockOption) initOption() {}

type contextOption struct{ ctx context.Context }

func (contextOption) initOption() {}

// WithLock makes the operation use l instead of its own lock, so that
// several operations can share one lock (Kafka's lockOpt, used by the group
// coordinator). Prefer a *SharedLock: with it, a callback running under the
// lock may trigger checks of the other operations that share it. With a
// lock that has TryLock but is not a SharedLock, a check that finds the
// lock held by another operation's goroutine is dropped, and waits for the
// next CheckAndComplete. A lock without TryLock is waited for.
func WithLock(l sync.Locker) InitOption { return lockOption{l} }

// WithContext ties the operation to ctx: if ctx ends while the operation
// is parked, the operation completes then (OnComplete runs, OnExpiration
// does not) and Cause returns context.Cause(ctx). It is released from its
// keys and its timeout like any other completion, and counted apart from
// early and expired completions. If ctx has ended before the operation is
// parked, it completes as soon as it is parked. context.Background() and
// context.TODO() cost nothing; another ctx that can never end is not
// watched, but is kept for the purgatory's observers (the parent of their
// spans: purgatory.WithObserver).
//
// The purgatory registers the operation with [context.AfterFunc] when it
// parks it and unregisters it when the operation leaves, so a long-lived
// ctx (a connection's) does not accumulate finished operations.
func WithContext(ctx context.Context) InitOption { return contextOption{ctx} }

// Init binds the Base to the operation that embeds it and sets its timeout.
// A timeout of zero or less expires the operation as soon as it is parked;
// one longer than 73 years is taken as 73 years.
// Init panics if self is nil or does not embed this Base, or if the
// operation is already parked, completed or cancelled. Base adds no method
// to self's type beyond those documented here, so self may declare any
// other method (a Run of its own, say) without effect on the lifecycle.
func (b *Base) Init(self DelayedOperation, timeout time.Duration, opts ...InitOption) {
	if self == nil || lifecycle.Of(self) != b.op() {
		panic("operation: Init must be given the operation that embeds this Base")
	}
	var o lifecycle.Options
	for _, opt := range opts {
		switch v := opt.(type) {
		case lockOption:
			o.Lock = v.lock
			if sl, ok := v.lock.(*SharedLock); ok {
				o.Lock = &sl.l
			}
		case contextOption:
			o.Ctx = v.ctx
		}
	}
	lifecycle.Init(b.op(), self, timeout, o)
}

// Timeout returns the timeout given to Init, or to the purgatory's
// ResetTimeout since.
func (b *Base) Timeout() time.Duration { return lifecycle.Timeout(b.op()) }

// IsCompleted reports whether the operation has completed, by any path.
func (b *Base) IsCompleted() bool { return lifecycle.IsCompleted(b.op()) }

// IsExpired reports whether the timeout, or the purgatory's Shutdown,
// completed the operation: whether OnExpiration runs.
func (b *Base) IsExpired() bool {
	k, ok := lifecycle.KindOf(b.op())
	return ok && (k == lifecycle.Expired || k == lifecycle.Shutdown)
}

// IsCancelled reports whether Purgatory.CancelForKey took the operation
// out of its purgatory. A cancelled operation has not completed (no
// callback ran) and cannot be parked again; ForceComplete still completes
// it.
func (b *Base) IsCancelled() bool { return lifecycle.IsCancelled(b.op()) }

// Cause reports why the operation completed. It is nil while the operation
// is pending and when it completed early (its TryComplete, or a
// ForceComplete); [ErrExpired] when its timeout completed it;
// purgatory.ErrShutdown when its purgatory shut down with it pending;
// context.Cause(ctx) when the context given to [WithContext] ended; and
// the cause given to the purgatory's CompleteForKey or Complete. Call it
// from OnComplete to tell a timeout from success:
//
//	func (f *delayedFetch) OnComplete() {
//		if errors.Is(f.Cause(), operation.ErrExpired) { ... }
//	}
func (b *Base) Cause() error {
	k, ok := lifecycle.KindOf(b.op())
	if !ok {
		return nil
	}
	switch k {
	case lifecycle.Expired:
		return ErrExpired
	case lifecycle.Shutdown:
		return lifecycle.ErrShutdown
	case lifecycle.Context:
		return lifecycle.ContextCause(b.op())
	case lifecycle.ForKey:
		return lifecycle.KeyCause(b.op())
	}
	return nil
}

// ForceComplete completes the operation if nothing has yet: it cancels the
// timeout, releases the operation from its watch lists, and calls
// OnComplete. It returns true only for the caller that completed it.
// Unlike sync.Once, a caller that loses returns false at once, without
// waiting for the winner's OnComplete to finish.
//
// TryComplete calls it when the operation can finish; user code may also
// call it, from any goroutine, to answer a parked request now. It takes no
// lock, so it does not wait for a TryComplete of the operation under way
// on another goroutine, whose own ForceComplete may then lose: to end a
// request whose client has gone, while a TryComplete may be claiming
// something for it, use the purgatory's Complete, which waits. Once the
// operation is parked, a panic in OnComplete is recovered and reported to
// its purgatory (counted and logged); the operation stays completed.
func (b *Base) ForceComplete() bool { return lifecycle.ForceComplete(b.op()) }
