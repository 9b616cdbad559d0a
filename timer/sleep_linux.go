//go:build linux

package timer

import (
	"syscall"
	"time"
)

// preciseSleep blocks the calling goroutine's thread for d with a direct
// nanosleep. The runtime's timers sleep in epoll_wait, whose timeout is in
// whole milliseconds, so a 300µs wait there ends up to a millisecond late;
// nanosleep ends within tens of microseconds. It cannot be interrupted, so
// it is used only for the last short stretch before a due bucket.
func preciseSleep(d time.Duration) bool {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		err := syscall.Nanosleep(&ts, &rem)
		if err != syscall.EINTR {
			return err == nil
		}
		ts = rem
	}
}
