//go:build !linux

package timer

import "time"

// preciseSleep is not available here: the caller falls back to its timer.
func preciseSleep(time.Duration) bool { return false }
