package purgatoryprom_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test shuts its purgatories down; a reaper or context goroutine
// left behind fails the package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
