package timer

import (
	"sync"
	"time"

	"github.com/purgatory-go/purgatory/internal/tasklink"
	"github.com/purgatory-go/purgatory/internal/tsc"
)

func init() {
	tasklink.System = func() (now, stamp func() int64) { return systemNow, systemStamp() }
	tasklink.Clock = func(tm any) (now, stamp func() int64, addAt func(task any, now int64) error, system bool) {
		t, ok := tm.(Timer)
		if !ok {
			return nil, nil, nil, false
		}
		st := systemTimerOf(t)
		if st == nil {
			return nil, nil, nil, false
		}
		addAt = func(task any, now int64) error { return st.addAt(task.(Task), now) }
		if st.sys {
			// Functions of their own, not closures over st: a completion,
			// on another core than the parks, then reads no field of the
			// timer. Reading st.sys and st.clock, next to the lock stripes
			// every Add writes, made the time in purgatory cost 13% of a
			// request in perf run C instead of 4%.
			return systemNow, systemStamp(), addAt, true
		}
		now = func() int64 { return int64(st.clock.Now()) }
		return now, now, addAt, false
	}
}

// systemNow is SystemTimer.now for the system clock.
func systemNow() int64 { return int64(time.Since(epoch)) }

// systemStamp reads systemNow's clock through the CPU's counter where it
// can. Made at the first purgatory's New, not at init: it reads a file.
var systemStamp = sync.OnceValue(func() func() int64 { return tsc.New(systemNow) })
