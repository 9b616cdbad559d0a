package timer_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left running
// when they finish: a timer or reaper that was not closed, or one whose
// Close did not wait for its goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
