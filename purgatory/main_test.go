package purgatory_test

import (
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/purgatory-go/purgatory/internal/lifecycle"
)

// contended is called when a goroutine is about to wait for an
// operation's own lock; the seam tests use it to know that a competitor has
// reached the lock. Installed before any test runs, so that setting the
// hook races with nothing.
var contended atomic.Pointer[func(*lifecycle.Op)]

func TestMain(m *testing.M) {
	lifecycle.OnContended = func(o *lifecycle.Op) {
		if f := contended.Load(); f != nil {
			(*f)(o)
		}
	}
	goleak.VerifyTestMain(m)
}
