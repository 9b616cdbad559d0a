package lincheck

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// failure is one thing a history broke: a partition porcupine could not
// linearize, or an invariant.
type failure struct {
	kind string // what broke: stable, for counting
	text string // the history (or the operation's story) that shows it
	size int    // events shown: the smallest failure of a kind is kept
	// model and ops, for porcupine's visualization; nil for invariants.
	model porcupine.Model
	ops   []porcupine.Operation
	seed  uint64
	shape string // the workload's size
}

// events turns the history's calls and callbacks into the model's
// events, each with the interval in which it took effect.
func (h *phist) events() []porcupine.Operation {
	var evs []porcupine.Operation
	cbClient := len(h.calls) // callbacks get a lane of their own
	add := func(in pin, out pout, call, ret int64, client int) {
		if call <= 0 {
			call = 1
		}
		if ret < call {
			ret = call
		}
		evs = append(evs, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	}
	cfkCall := map[int]rcall{}
	for _, cs := range h.calls {
		for _, c := range cs {
			switch c.kind {
			case evPark:
				add(pin{kind: evPark, op: c.op}, pout{ok: c.ok, err: c.err}, c.call, c.ret, c.client)
				if c.err == errNone && h.ops[c.op].lock == nil {
					// A park that completed the operation itself (true)
					// may have added its timeout first: its last
					// TryComplete comes after the timeout's Add. The
					// model may place this arm after the completion,
					// where it does nothing.
					add(pin{kind: evArm, op: c.op, d: int64(h.ops[c.op].timeout)}, pout{}, c.call, c.ret, c.client)
				}
			case evSatisfy, evCtxCancel:
				add(pin{kind: c.kind, op: c.op}, pout{}, c.call, c.ret, c.client)
			case evCheck:
				add(pin{kind: evCheck, op: -1, key: c.key}, pout{}, c.call, c.ret, c.client)
			case evCheckUpTo:
				add(pin{kind: evCheckUpTo, op: -1, key: c.key, level: c.level}, pout{}, c.call, c.ret, c.client)
			case evFC:
				add(pin{kind: evFC, op: c.op}, pout{ok: c.ok}, c.call, c.ret, c.client)
			case evReset:
				add(pin{kind: evReset, op: c.op, d: c.d}, pout{ok: c.ok}, c.call, c.ret, c.client)
			case evCFK:
				cfkCall[c.cid] = c
				add(pin{kind: evCFK, op: -1, key: c.key, idx: c.cid}, pout{}, c.call, c.ret, c.client)
			case evCancelKey:
				add(pin{kind: evCancelKey, op: -1, key: c.key, idx: c.cid}, pout{}, c.call, c.ret, c.client)
				for _, i := range c.list {
					add(pin{kind: evCancelled, op: i, idx: c.cid}, pout{}, c.call, c.ret, c.client)
				}
			case evAdvStart:
				add(pin{kind: evAdvStart, op: -1, d: c.d, idx: c.cid}, pout{}, c.call, c.ret, c.client)
				add(pin{kind: evAdvEnd, op: -1, idx: c.cid}, pout{}, c.call, c.ret, c.client)
			}
		}
	}
	for _, o := range h.ops {
		for _, td := range o.rec.tdone {
			add(pin{kind: evTDone, op: o.id}, pout{}, td.t0, td.oc, cbClient)
		}
		for _, c := range o.rec.complete {
			var cfk *cfkErr
			switch {
			case c.cause == nil:
				// Early: its own TryComplete (tdone) or a ForceComplete
				// call, both events already.
			case errors.Is(c.cause, operation.ErrExpired):
				add(pin{kind: evExpired, op: o.id}, pout{}, c.low, c.start, cbClient)
			case errors.Is(c.cause, purgatory.ErrShutdown):
				add(pin{kind: evShutDone, op: o.id}, pout{}, c.low, c.start, cbClient)
			case errors.Is(c.cause, errCtx):
				add(pin{kind: evCtxDone, op: o.id}, pout{}, o.ctxAt.Load(), c.start, cbClient)
			case errors.As(c.cause, &cfk):
				add(pin{kind: evForKeyDone, op: o.id, idx: cfk.cid}, pout{}, cfkCall[cfk.cid].call, c.start, cbClient)
			}
		}
	}
	add(pin{kind: evRest, op: -1}, pout{}, h.restCall, h.restRet, cbClient)
	add(pin{kind: evShutStart, op: -1}, pout{}, h.shutCall, h.shutRet, cbClient)
	add(pin{kind: evShutEnd, op: -1}, pout{}, h.shutCall, h.shutRet, cbClient)
	return evs
}

// partitions splits the events by operation: each gets its own events,
// the calls on its keys (CompleteForKey and CancelForKey renumbered for
// the partition), and every Advance, the rest point and Shutdown.
func (h *phist) partitions(evs []porcupine.Operation) [][]porcupine.Operation {
	var parts [][]porcupine.Operation
	for _, o := range h.ops[:len(h.ops)-1] {
		if !h.involved(o.id) {
			continue
		}
		keyOf := map[int]bool{}
		for _, k := range o.keys {
			keyOf[k] = true
		}
		local := map[int]int{}
		idx := func(cid int) int {
			if v, ok := local[cid]; ok {
				return v
			}
			local[cid] = len(local)
			return local[cid]
		}
		part := []porcupine.Operation{{ClientId: 0, Input: pin{kind: evInit, op: o.id, d: int64(o.timeout),
			shared: o.lock != nil, levels: o.lv}, Output: pout{}, Call: 0, Return: 0}}
		for _, e := range evs {
			in := e.Input.(pin)
			switch in.kind {
			case evAdvStart, evAdvEnd, evRest, evShutStart, evShutEnd:
			case evCheck, evCheckUpTo:
				if !keyOf[in.key] {
					continue
				}
			case evCFK, evCancelKey:
				if !keyOf[in.key] {
					continue
				}
				in.idx = idx(in.idx)
				e.Input = in
			case evForKeyDone, evCancelled:
				if in.op != o.id {
					continue
				}
				in.idx = idx(in.idx)
				e.Input = in
			default:
				if in.op != o.id {
					continue
				}
			}
			part = append(part, e)
		}
		parts = append(parts, part)
	}
	return parts
}

// involved reports whether operation i was the subject of any call.
func (h *phist) involved(i int) bool {
	for _, cs := range h.calls {
		for _, c := range cs {
			if c.op == i {
				return true
			}
		}
	}
	return false
}

// lateReset is the partition checked against the defect-2 variant.
func lateReset(part []porcupine.Operation) []porcupine.Operation {
	out := append([]porcupine.Operation(nil), part...)
	in := out[0].Input.(pin)
	in.lateReset = true
	out[0].Input = in
	return out
}

// overtakenHold is the count history as the docs allow it: a park that a
// ForceComplete of its own operation overtakes (the two calls overlap,
// and the park returns ErrAlreadyWatched) may hold its place from its
// Reserve until it finds the operation completed, within its call
// (docs/purgatory.md, "Back-pressure").
func overtakenHold(ce []porcupine.Operation) []porcupine.Operation {
	return refusalsHold(ce, func(park porcupine.Operation) bool { return overtaken(ce, park) })
}

// refusalsHold returns ce with each park refused with ErrAlreadyWatched
// for which holds reports true split into a hold of a place and its
// release (evHold, then evRelease), both within the park's call.
func refusalsHold(ce []porcupine.Operation, holds func(park porcupine.Operation) bool) []porcupine.Operation {
	var out []porcupine.Operation
	for _, e := range ce {
		in := e.Input.(pin)
		if in.kind == evPark && e.Output.(pout).err == errAlready && holds(e) {
			h, r := e, e
			h.Input = pin{kind: evHold, op: in.op}
			r.Input = pin{kind: evRelease, op: in.op}
			out = append(out, h, r)
			continue
		}
		out = append(out, e)
	}
	return out
}

// overtaken reports whether a ForceComplete of park's operation that
// completed it overlaps park's call.
func overtaken(ce []porcupine.Operation, park porcupine.Operation) bool {
	op := park.Input.(pin).op
	for _, e := range ce {
		in := e.Input.(pin)
		if in.kind == evFC && in.op == op && e.Output.(pout).ok && e.Call < park.Return && park.Call < e.Return {
			return true
		}
	}
	return false
}

// refusedHold is the count history as e2a455e's defect 7 makes it: a
// park refused with ErrAlreadyWatched holds a place for a while within
// its call (evHold, then evRelease).
func refusedHold(ce []porcupine.Operation) []porcupine.Operation {
	return refusalsHold(ce, func(porcupine.Operation) bool { return true })
}

// countEvents are the events countModel looks at.
func countEvents(evs []porcupine.Operation) []porcupine.Operation {
	var out []porcupine.Operation
	for _, e := range evs {
		switch e.Input.(pin).kind {
		case evPark, evFC, evTDone, evExpired, evForKeyDone, evCtxDone, evShutDone, evCancelled:
			out = append(out, e)
		}
	}
	return out
}

// check checks the history: the model, then the invariants.
func (h *phist) check() []failure {
	var fails []failure
	evs := h.events()
	if h.cfg.bound > 0 {
		ce := withGiveBacks(overtakenHold(countEvents(evs)))
		m := countModel(len(h.ops), h.cfg.bound)
		if porcupine.CheckOperationsTimeout(m, ce, *checkTimeout) == porcupine.Illegal {
			kind := "linearizability: WithMaxPending count (other)"
			if porcupine.CheckOperationsTimeout(m, refusedHold(ce), *checkTimeout) == porcupine.Ok {
				kind = "linearizability: WithMaxPending count (defect 7: a refused park holds a place)"
			}
			fails = append(fails, h.modelFailure(kind, m, ce))
		}
	}
	parts := h.partitions(evs)
	m := purgatoryModel(parts)
	if porcupine.CheckOperationsTimeout(m, nil, *checkTimeout) == porcupine.Illegal {
		// Find the smallest partition that fails alone.
		var worst []porcupine.Operation
		for _, part := range parts {
			pm := purgatoryModel([][]porcupine.Operation{part})
			if porcupine.CheckOperationsTimeout(pm, nil, *checkTimeout) == porcupine.Illegal {
				if worst == nil || len(part) < len(worst) {
					worst = part
				}
			}
		}
		if worst != nil {
			kind := "linearizability: operation (other)"
			if porcupine.CheckOperationsTimeout(purgatoryModel([][]porcupine.Operation{lateReset(worst)}), nil, *checkTimeout) == porcupine.Ok {
				kind = "linearizability: operation (defect 2: a reset during the park takes its deadline late)"
			}
			f := h.modelFailure(kind, purgatoryModel([][]porcupine.Operation{worst}), worst)
			f.text += h.story(worst[0].Input.(pin).op)
			fails = append(fails, f)
		}
	}
	fails = append(fails, h.invariants()...)
	return fails
}

func (h *phist) modelFailure(kind string, m porcupine.Model, ops []porcupine.Operation) failure {
	return failure{kind: kind, text: printOps(m, ops), size: len(ops), model: m, ops: ops, seed: h.seed, shape: h.shape()}
}

func (h *phist) shape() string {
	s := fmt.Sprintf("%d workers x %d calls, %d advancers x %d", h.cfg.workers, h.cfg.steps, h.cfg.advancers, h.cfg.advances)
	if h.cfg.bound > 0 {
		s += fmt.Sprintf(", WithMaxPending(%d)", h.cfg.bound)
	}
	return s
}

// printOps prints a history, one event a line in the order of their
// calls: [call, return], the worker (cb: a callback), the event.
func printOps(m porcupine.Model, ops []porcupine.Operation) string {
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Call != sorted[j].Call {
			return sorted[i].Call < sorted[j].Call
		}
		return sorted[i].Return < sorted[j].Return
	})
	var b strings.Builder
	for _, o := range sorted {
		fmt.Fprintf(&b, "  [%6d,%6d] c%-2d %s\n", o.Call, o.Return, o.ClientId, m.DescribeOperation(o.Input, o.Output))
	}
	return b.String()
}

// story prints what happened to operation i: its calls and callbacks.
func (h *phist) story(i int) string {
	if i < 0 || i >= len(h.ops) {
		return ""
	}
	o := h.ops[i]
	type line struct {
		at   int64
		text string
	}
	var ls []line
	for _, cs := range h.calls {
		for _, c := range cs {
			if c.op != i && !(c.kind == evCancelKey && contains(c.list, i)) {
				continue
			}
			ls = append(ls, line{c.call, fmt.Sprintf("[%6d,%6d] c%-2d %s", c.call, c.ret, c.client, describeCall(c))})
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.rec.parked {
		ls = append(ls, line{c.start, fmt.Sprintf("[%6d,%6d] g%-3d observer Parked #%d", c.start, c.end, c.g, c.seq)})
	}
	for _, c := range o.rec.left {
		ls = append(ls, line{c.start, fmt.Sprintf("[%6d,%6d] g%-3d observer Left #%d %v cause=%v", c.start, c.end, c.g, c.seq, c.outcome, c.cause)})
	}
	for _, c := range o.rec.refused {
		ls = append(ls, line{c.start, fmt.Sprintf("[%6d,%6d] g%-3d observer Refused %v", c.start, c.end, c.g, c.err)})
	}
	for _, c := range o.rec.complete {
		ls = append(ls, line{c.start, fmt.Sprintf("[%6d,%6d] g%-3d OnComplete cause=%v", c.start, c.end, c.g, c.cause)})
	}
	for _, c := range o.rec.expire {
		ls = append(ls, line{c.start, fmt.Sprintf("[%6d,%6d] g%-3d OnExpiration", c.start, c.end, c.g)})
	}
	sort.SliceStable(ls, func(a, b int) bool { return ls[a].at < ls[b].at })
	var b strings.Builder
	fmt.Fprintf(&b, "  op%d: keys %v, timeout %d, levels %v, shared lock %v, context %v; %d TryComplete calls\n",
		i, o.keys, o.timeout, o.lv, o.lock != nil, o.cancel != nil, o.rec.tries)
	for _, l := range ls {
		b.WriteString("    " + l.text + "\n")
	}
	return b.String()
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func describeCall(c rcall) string {
	switch c.kind {
	case evPark:
		if c.err != errNone {
			return fmt.Sprintf("TryCompleteElseWatch(op%d) -> %s", c.op, errNames[c.err])
		}
		return fmt.Sprintf("TryCompleteElseWatch(op%d) -> %v", c.op, c.ok)
	case evFC:
		return fmt.Sprintf("op%d.ForceComplete() -> %v", c.op, c.ok)
	case evReset:
		return fmt.Sprintf("ResetTimeout(op%d, %d) -> %v", c.op, c.d, c.ok)
	case evSatisfy:
		return fmt.Sprintf("satisfy(op%d)", c.op)
	case evCtxCancel:
		return fmt.Sprintf("cancel(op%d's context)", c.op)
	case evCancelKey:
		return fmt.Sprintf("CancelForKey(k%d) -> %v", c.key, c.list)
	}
	return c.kind.String()
}

// invariants checks what is documented but is not linearizability: the
// callbacks each operation got, the observer's story, the counts at rest.
func (h *phist) invariants() []failure {
	var fails []failure
	fail := func(kind string, op int, format string, args ...any) {
		text := fmt.Sprintf("  "+format+"\n", args...)
		size := 0
		if op >= 0 {
			text += h.story(op)
			size = strings.Count(text, "\n")
		} else {
			text += h.callsText()
			size = strings.Count(text, "\n")
		}
		fails = append(fails, failure{kind: "invariant: " + kind, text: text, size: size, seed: h.seed, shape: h.shape()})
	}
	if !h.settled {
		fail("context completions settle", -1, "an operation whose context was cancelled did not complete within 5s")
	}
	type opSum struct {
		accepted, refAlready, userFC bool
		cancelled                    bool
		full, shut                   int
	}
	sums := make([]opSum, len(h.ops))
	cancelledBy := map[int]int{}
	var want struct {
		early, expired, ctx, forKey, cancelled, full uint64
		pending, watched                             int
	}
	for _, cs := range h.calls {
		for _, c := range cs {
			switch c.kind {
			case evPark:
				s := &sums[c.op]
				switch c.err {
				case errNone:
					s.accepted = true
				case errAlready:
					s.refAlready = true
				case errFull:
					s.full++
					want.full++
				case errShutdown:
					s.shut++
				case errOther:
					fail("TryCompleteElseWatch's errors", c.op, "op%d: unexpected error", c.op)
				}
				if c.ok {
					// Completed by its own TryComplete, on this goroutine, in this call.
					o := h.ops[c.op]
					found := false
					for _, td := range o.rec.tdone {
						if td.g == c.g && td.t0 > c.call && td.oc < c.ret {
							found = true
						}
					}
					if !found {
						fail("TryCompleteElseWatch true means its own TryComplete completed it", c.op,
							"op%d: TryCompleteElseWatch returned true at [%d,%d] without a completing TryComplete in it", c.op, c.call, c.ret)
					}
				}
			case evFC:
				if c.ok {
					sums[c.op].userFC = true
				}
			case evCancelKey:
				seen := map[int]bool{}
				for _, i := range c.list {
					if seen[i] {
						fail("CancelForKey returns each operation once", i, "op%d returned twice by CancelForKey(k%d)", i, c.key)
					}
					seen[i] = true
					cancelledBy[i]++
					sums[i].cancelled = true
					want.cancelled++
				}
			case evCFK:
				n := 0
				for _, o := range h.ops {
					for _, oc := range o.rec.complete {
						var e *cfkErr
						if errors.As(oc.cause, &e) && e.cid == c.cid {
							n++
						}
					}
				}
				if n != c.n {
					fail("CompleteForKey counts the operations whose Cause is its cause", -1,
						"CompleteForKey#%d(k%d) returned %d, but %d operations report its cause", c.cid, c.key, c.n, n)
				}
			case evCheck, evCheckUpTo:
				n := 0
				for _, o := range h.ops {
					for _, td := range o.rec.tdone {
						if td.g == c.g && td.t0 > c.call && td.oc < c.ret {
							n++
						}
					}
				}
				if c.n > n {
					fail("CheckAndComplete counts what it completed", -1,
						"%v(k%d) at [%d,%d] returned %d, but its goroutine completed %d operations in it", c.kind, c.key, c.call, c.ret, c.n, n)
				}
			}
		}
	}
	// The park after Shutdown.
	if errors.Is(h.lateErr, purgatory.ErrShutdown) {
		sums[h.lateOp].shut++
	}
	var told [purgatory.Outcomes]uint64
	var exceptions uint64
	for i, o := range h.ops {
		s := sums[i]
		if cancelledBy[i] > 1 {
			fail("an operation is cancelled once", i, "op%d returned by %d CancelForKey calls", i, cancelledBy[i])
		}
		o.mu.Lock()
		rec := o.rec
		o.mu.Unlock()
		nc := len(rec.complete)
		// OnComplete exactly once.
		switch {
		case nc > 1:
			fail("OnComplete exactly once", i, "op%d: OnComplete ran %d times", i, nc)
			continue
		case nc == 0 && (s.userFC || s.accepted && !o.IsCancelled()):
			fail("OnComplete exactly once", i, "op%d: accepted (or force-completed) but OnComplete never ran", i)
			continue
		}
		// OnExpiration only after an expiry or Shutdown, after OnComplete.
		expires := nc == 1 && (errors.Is(rec.complete[0].cause, operation.ErrExpired) ||
			errors.Is(rec.complete[0].cause, purgatory.ErrShutdown))
		switch {
		case expires && len(rec.expire) != 1, !expires && len(rec.expire) != 0:
			fail("OnExpiration only after an expiry or Shutdown", i, "op%d: OnExpiration ran %d times, cause %v", i, len(rec.expire), causeOf(rec))
			continue
		case expires && rec.expire[0].start < rec.complete[0].end:
			fail("OnExpiration after OnComplete", i, "op%d: OnExpiration began before OnComplete ended", i)
			continue
		}
		// The observer: each Parked followed by exactly one Left.
		if len(rec.left) != len(rec.parked) {
			fail("observer: one Left for each Parked", i, "op%d: %d Parked, %d Left", i, len(rec.parked), len(rec.left))
			continue
		}
		bad := false
		for _, l := range rec.left {
			if l.seq >= len(rec.parked) || rec.parked[l.seq].end > l.start {
				bad = true
			}
		}
		if bad {
			fail("observer: Left after its Parked", i, "op%d: a Left came before its Parked", i)
			continue
		}
		// Never told of a refused operation, with one documented exception:
		// a park that a ForceComplete overtook (ErrAlreadyWatched).
		allowed := 0
		if s.accepted {
			allowed = 1
		}
		exc := 0
		if s.refAlready && s.userFC && len(rec.parked) > allowed {
			exc = 1
		}
		if len(rec.parked) > allowed+exc {
			fail("observer never told of a refused park", i,
				"op%d: %d Parked told for %d accepted park(s) (ForceComplete by user code: %v)", i, len(rec.parked), allowed, s.userFC)
			continue
		}
		exceptions += uint64(exc)
		// Parked and Left before OnComplete (docs/observing.md). Not for
		// the exception above: the refused park told Parked after its
		// first look at the state and learns of the ForceComplete only at
		// its compare-and-swap, so the winner's OnComplete may have begun
		// before either, and the docs promise no order there.
		if nc == 1 && exc == 0 {
			oc := rec.complete[0]
			late := ""
			// Stamps are taken inside the callbacks: one that began after
			// OnComplete began ran after it, whatever preempted whom.
			for _, p := range rec.parked {
				if p.start > oc.start {
					late = fmt.Sprintf("Parked #%d at %d after OnComplete at %d", p.seq, p.start, oc.start)
				}
			}
			for _, l := range rec.left {
				if l.outcome != purgatory.OutcomeCancelled && l.start > oc.start {
					late = fmt.Sprintf("Left #%d at %d after OnComplete at %d", l.seq, l.start, oc.start)
				}
			}
			if late != "" {
				fail("observer told Parked and Left before OnComplete", i, "op%d: %s", i, late)
				continue
			}
		}
		// Refused only for ErrFull and ErrShutdown, once each.
		nf, ns := 0, 0
		for _, r := range rec.refused {
			switch {
			case errors.Is(r.err, purgatory.ErrFull):
				nf++
			case errors.Is(r.err, purgatory.ErrShutdown):
				ns++
			default:
				nf = -1000
			}
		}
		if nf != s.full || ns != s.shut {
			fail("observer told Refused for each ErrFull and ErrShutdown", i,
				"op%d: %d ErrFull and %d ErrShutdown returned, Refused told %d and %d", i, s.full, s.shut, nf, ns)
			continue
		}
		for _, l := range rec.left {
			if l.start < h.restCall {
				told[l.outcome]++
			}
		}
		// What the counts at rest should be.
		if !s.accepted {
			continue
		}
		doneAtRest := nc == 1 && rec.complete[0].start < h.restCall
		if o.IsCancelled() {
			continue
		}
		if !doneAtRest {
			want.pending++
			want.watched += len(o.keys)
			continue
		}
		switch c := rec.complete[0].cause; {
		case c == nil:
			want.early++
		case errors.Is(c, operation.ErrExpired):
			want.expired++
		case errors.Is(c, errCtx):
			want.ctx++
		default:
			var e *cfkErr
			if errors.As(c, &e) {
				want.forKey++
			}
		}
	}
	if len(fails) > 0 {
		return fails // the counts would only repeat what broke
	}
	r, st := h.rest, h.rest.stats
	if r.numDelayed != want.pending || st.Pending != want.pending || r.size != want.pending ||
		r.watched != want.watched || st.Watched != want.watched {
		fail("counts exact at rest", -1, "at rest NumDelayed %d, Stats.Pending %d, timer Size %d (want %d); Watched %d, Stats.Watched %d (want %d)",
			r.numDelayed, st.Pending, r.size, want.pending, r.watched, st.Watched, want.watched)
	}
	if st.CompletedEarly != want.early || st.Expired != want.expired || st.ContextDone != want.ctx ||
		st.CompletedForKey != want.forKey || st.Cancelled != want.cancelled || st.Full != want.full || st.Shutdown != 0 {
		fail("Stats exact at rest", -1, "at rest Stats %+v; want early %d expired %d context %d forKey %d cancelled %d full %d",
			st, want.early, want.expired, want.ctx, want.forKey, want.cancelled, want.full)
	}
	if told[purgatory.OutcomeEarly] != st.CompletedEarly+exceptions || told[purgatory.OutcomeExpired] != st.Expired ||
		told[purgatory.OutcomeContext] != st.ContextDone || told[purgatory.OutcomeForKey] != st.CompletedForKey ||
		told[purgatory.OutcomeCancelled] != st.Cancelled {
		fail("departures told to the observer match Stats", -1, "told %v (early includes %d parks overtaken by ForceComplete), Stats %+v",
			told, exceptions, st)
	}
	a := h.after
	if a.numDelayed != 0 || a.watched != 0 || a.stats.Pending != 0 || a.stats.Watched != 0 {
		fail("nothing pending after Shutdown", -1, "after Shutdown NumDelayed %d, Watched %d, Stats %+v", a.numDelayed, a.watched, a.stats)
	}
	if !errors.Is(h.lateErr, purgatory.ErrShutdown) {
		fail("ErrShutdown after Shutdown", h.lateOp, "a park after Shutdown returned %v", h.lateErr)
	}
	return fails
}

func causeOf(rec oprec) error {
	if len(rec.complete) == 0 {
		return nil
	}
	return rec.complete[0].cause
}

// callsText prints every call of the history, in stamp order.
func (h *phist) callsText() string {
	var all []rcall
	for _, cs := range h.calls {
		all = append(all, cs...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].call < all[j].call })
	var b strings.Builder
	for _, c := range all {
		if c.kind == evInit {
			continue
		}
		fmt.Fprintf(&b, "    [%6d,%6d] c%-2d %s\n", c.call, c.ret, c.client, describeCall(c))
	}
	return b.String()
}
