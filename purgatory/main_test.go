package purgatory_test

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// full runs the largest tests at full size. They run scaled down by
// default, since the race detector slows them tenfold; make test runs them
// once more at full size without it (go test ... -args -full).
var full = flag.Bool("full", false, "run the largest tests at full size")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
