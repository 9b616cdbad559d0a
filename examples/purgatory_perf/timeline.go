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
//
// Lateness counts from a request's arrival, stamped before its park, as a
// client would see it; the purgatory's timer reads its clock inside the
// park. Two more columns tell the two apart: the largest lateness counted
// from the return of each request's park (the timer read its clock
// between the two stamps, so this is a lower bound of how late the timer
// was), and the longest park among the window's requests. A producer
// descheduled in the middle of a park (by the collector's workers, say)
// makes a late expiry 30 s later whose park is as long as it is late.
func writeTimeline(path string, t *tracker, start time.Duration) error {
	type window struct {
		expired     int
		maxLate     int64 // from arrival
		maxLateTime int64 // from the park's return
		maxPark     int64 // arrival to the park's return
		gcEnds      int
	}
	windows := map[int64]*window{}
	at := func(d time.Duration) *window {
		k := int64((d - start) / timelineWindow)
		w := windows[k]
		if w == nil {
			w = &window{maxLate: math.MinInt64, maxLateTime: math.MinInt64}
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
		// late = expiredAt - (arrival + timeout), so park = parkedAt - arrival
		// = parkedAt - (expiredAt - late - timeout).
		park := t.parkedAt[id] - (t.expiredAt[id] - l - int64(t.timeout))
		w.maxPark = max(w.maxPark, park)
		w.maxLateTime = max(w.maxLateTime, l-park)
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
	fmt.Fprintln(b, "# window_start_ms\texpired\tmax_late_ms\tmax_late_after_park_ms\tmax_park_ms\tgc_ends")
	for k := first; k <= last; k++ {
		w := windows[k]
		if w == nil {
			continue
		}
		maxLate, maxLateTime, maxPark := "-", "-", "-"
		if w.expired > 0 {
			maxLate = fmt.Sprintf("%.2f", ms(time.Duration(w.maxLate)))
			maxLateTime = fmt.Sprintf("%.2f", ms(time.Duration(w.maxLateTime)))
			maxPark = fmt.Sprintf("%.2f", ms(time.Duration(w.maxPark)))
		}
		fmt.Fprintf(b, "%d\t%d\t%s\t%s\t%s\t%d\n", k*timelineWindow.Milliseconds(), w.expired, maxLate, maxLateTime, maxPark, w.gcEnds)
	}
	if err := b.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
