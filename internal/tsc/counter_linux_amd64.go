package tsc

import (
	"bytes"
	"os"
)

// rdtsc reads the time-stamp counter, without waiting for earlier
// instructions: a reading may be some nanoseconds early, which does not
// matter here.
func rdtsc() int64

// trusted reports whether the kernel keeps time with the counter, which it
// does only when the counter runs at a constant rate and in step across
// CPUs.
func trusted() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && bytes.Equal(bytes.TrimSpace(b), []byte("tsc"))
}
