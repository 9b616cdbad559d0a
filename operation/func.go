package operation

import "time"

// Func is a DelayedOperation made of two functions, for request handlers
// that do not want a type of their own: one that says whether the request
// can be answered now, and one that answers it. Park it in a
// Purgatory[K, *Func].
type Func struct {
	Base
	ready  func() bool
	answer func(cause error)
}

// NewFunc returns an initialised operation with the given timeout.
//
// ready reports whether the operation can complete now; it runs under the
// operation's lock, as TryComplete does, and may be nil for an operation
// that only its timeout, its context or a ForceComplete completes. answer
// runs exactly once, when the operation completes, with its Cause: nil when
// ready returned true or ForceComplete was called, ErrExpired on timeout,
// purgatory.ErrShutdown when the purgatory shut down, or the context's
// cause (see WithContext). answer runs on whichever goroutine completed the
// operation, so it must not block: hand the answer to a buffered channel,
// or write it out directly. NewFunc panics if answer is nil.
func NewFunc(timeout time.Duration, ready func() bool, answer func(cause error), opts ...InitOption) *Func {
	if answer == nil {
		panic("operation: NewFunc needs an answer function")
	}
	f := &Func{ready: ready, answer: answer}
	f.Init(f, timeout, opts...)
	return f
}

// TryComplete completes the operation if ready reports that it can.
func (f *Func) TryComplete() bool {
	if f.ready != nil && f.ready() {
		return f.ForceComplete()
	}
	return false
}

// OnComplete calls answer with the operation's Cause.
func (f *Func) OnComplete() { f.answer(f.Cause()) }

// OnExpiration does nothing: answer has already seen ErrExpired.
func (f *Func) OnExpiration() {}
