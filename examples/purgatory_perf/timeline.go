package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"time"
)

// timelineWindow is the span of one line of -timeline.
const timelineWindow = 10 * time.Millisecond

// writeTimeline writes, for every timelineWindow of the run from start, the
// requests that expired in it, the largest lateness among them, and how
// many GC cycles ended in it. It shows when in a run the late expiries
// fall (the first timeouts, a collection) without a trace; an execution
// trace (-trace) then shows what the reaper was doing at that moment.
func writeTimeline(path string, t *tracker, start time.Duration) error {
	type window struct {
		expired int
		maxLate int64
		gcEnds  int
	}
	windows := map[int64]*window{}
	at := func(d time.Duration) *window {
		k := int64((d - start) / timelineWindow)
		w := windows[k]
		if w == nil {
			w = &window{maxLate: math.MinInt64}
			windows[k] = w
		}
		return w
	}
	for id, l := range t.late {
		if l == math.MinInt64 {
			continue
		}
		w := at(time.Duration(t.expiredAt[id]))
		w.expired++
		w.maxLate = max(w.maxLate, l)
	}
	// GC cycles end on the wall clock; epoch holds both clocks' readings.
	var gc debug.GCStats
	debug.ReadGCStats(&gc)
	for _, end := range gc.PauseEnd {
		if d := end.Sub(epoch); d >= start {
			at(d).gcEnds++
		}
	}
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	for k := range windows {
		first, last = min(first, k), max(last, k)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	b := bufio.NewWriter(f)
	fmt.Fprintln(b, "# window_start_ms\texpired\tmax_late_ms\tgc_ends")
	for k := first; k <= last; k++ {
		w := windows[k]
		if w == nil {
			continue
		}
		maxLate := "-"
		if w.expired > 0 {
			maxLate = fmt.Sprintf("%.2f", ms(time.Duration(w.maxLate)))
		}
		fmt.Fprintf(b, "%d\t%d\t%s\t%d\n", k*timelineWindow.Milliseconds(), w.expired, maxLate, w.gcEnds)
	}
	if err := b.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
