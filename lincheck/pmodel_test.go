package lincheck

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The purgatory's model is checked one operation at a time (porcupine's
// partitions): each partition holds one operation's calls and callbacks,
// the calls on its keys, and every Advance, Shutdown and the rest point.
// Nothing the docs promise about one operation depends on another's state,
// except WithMaxPending's bound, which countModel checks over the whole
// history.

// pkind is what an event of the model is.
type pkind uint8

const (
	evInit       pkind = iota // the partition's constants: first, at stamp 0
	evPark                    // TryCompleteElseWatch: its decision (accepted, refused)
	evArm                     // the same call: watched on every key, timeout added (deadline measured)
	evSatisfy                 // the test made the operation's TryComplete say yes
	evCheck                   // CheckAndComplete(key)
	evCheckUpTo               // CheckAndCompleteUpTo(key, level)
	evFC                      // ForceComplete from user code
	evReset                   // ResetTimeout(op, d)
	evCFK                     // CompleteForKey(key, cause): its removal of the key's list
	evForKeyDone              // ... one operation completed with that call's cause
	evCancelKey               // CancelForKey(key): its removal of the key's list
	evCancelled               // ... one operation it returned (cancelled)
	evCtxCancel               // the operation's context was cancelled
	evCtxDone                 // completed by its context (OnComplete, cause of the context)
	evTDone                   // completed by its own TryComplete (inside any check or park)
	evExpired                 // completed by its timeout (OnComplete, ErrExpired)
	evAdvStart                // MockTimer.Advance(d): the clock moves
	evAdvEnd                  // the same Advance returns: what was due at its move has left
	evRest                    // everything has returned and settled
	evShutStart               // Shutdown: closed
	evShutDone                // completed by Shutdown (ErrShutdown)
	evShutEnd                 // Shutdown returned

	// Only in countModel's variant of defect 7 (refusedHold).
	evHold    // a refused park's place taken
	evRelease // ... and given back

	// Only in countModel: a departure's giving back of its place
	// (withGiveBacks).
	evGiveBack
)

var pkindNames = [...]string{"init", "park", "arm", "satisfy", "check", "checkUpTo", "forceComplete",
	"reset", "completeForKey", "forKeyDone", "cancelForKey", "cancelled", "ctxCancel", "ctxDone",
	"tryDone", "expired", "advance", "advanceEnd", "rest", "shutdown", "shutdownDone", "shutdownEnd",
	"hold", "release", "giveBack"}

func (k pkind) String() string { return pkindNames[k] }

// Errors TryCompleteElseWatch returns, as the model sees them.
const (
	errNone uint8 = iota
	errFull
	errAlready
	errShutdown
	errOther
)

var errNames = [...]string{"nil", "ErrFull", "ErrAlreadyWatched", "ErrShutdown", "other"}

// pin is an event's input.
type pin struct {
	kind  pkind
	op    int   // the operation, or -1
	key   int   // for calls on a key
	level int64 // CheckAndCompleteUpTo's level; evInit: WatchLevel on this partition's key (unused)
	d     int64 // Advance's and ResetTimeout's duration, evArm/evInit: the timeout
	idx   int   // evAdv*: the Advance's id; evCFK, evForKeyDone, evCancelKey, evCancelled: the call's index in the partition
	// evInit: the partition's operation shares a SharedLock (its park may
	// be deferred to the unlock), and its WatchLevel on each key if it is
	// Leveled.
	shared bool
	levels levels
	// evInit: model e2a455e's defect 2 instead of the docs, to tell a
	// failure that is defect 2 from one that is not: a reset made while
	// the park is under way has its deadline measured again by the
	// park's own Add, and nothing expires the operation before that.
	lateReset bool
}

// levels are an operation's WatchLevel on each of its keys (at most 3).
type levels struct {
	leveled bool
	n       int
	keys    [3]int
	lvls    [3]int64
}

func (l levels) String() string {
	if !l.leveled {
		return "-"
	}
	var parts []string
	for i := range l.n {
		parts = append(parts, fmt.Sprintf("k%d@%d", l.keys[i], l.lvls[i]))
	}
	return strings.Join(parts, ",")
}

// pout is an event's output.
type pout struct {
	ok  bool  // park: completed in the call; forceComplete, reset: what it returned
	err uint8 // park's error
}

// Operation states.
const (
	stFresh     uint8 = iota // created, never accepted
	stDeferred               // a park of it waits for its held SharedLock
	stPending                // parked: not completed, not cancelled
	stDone                   // completed, whoever did it
	stCancelled              // CancelForKey took it out
)

var stNames = [...]string{"fresh", "deferred", "pending", "done", "cancelled"}

// xstate is one operation's state in its partition. It is compared with
// ==, so it holds no slice or map.
type xstate struct {
	init     bool
	shared   bool
	late     bool  // lateReset: the defect-2 variant
	resetD   int64 // the variant: a reset's timeout during the park, measured again at its end
	resetInP bool
	timeout  int64
	levels   levels
	clock    int64
	st       uint8
	armed    bool  // watched on its keys and its timeout in the timer
	hasDL    bool  // deadline is set: armed, or a reset during the park
	deadline int64 // on the MockTimer's clock
	ready    bool  // its TryComplete says yes
	ctxDone  bool
	// owed says that what the docs promise leaves it no way to stay
	// pending at rest: a check of one of its keys found it ready, its park
	// found it ready, its context ended, CompleteForKey or CancelForKey
	// found it watched.
	owed   bool
	closed bool
	// hi is where the Advance under way (adv, 0 if none) takes the
	// clock: a MockTimer's Advance stops at each deadline on its way, so
	// a call made meanwhile reads any time from clock to hi (reads), and
	// an expiry moves the clock to its deadline. Advances take turns, one
	// whole before the next. Without one, hi is clock.
	hi      int64
	adv     int
	claims  uint64 // CompleteForKey calls (partition index) that found it parked
	cclaims uint64 // CancelForKey calls likewise
}

func (s xstate) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clock=%d %s", s.clock, stNames[s.st])
	if s.st == stPending {
		if s.armed {
			b.WriteString(" armed")
		}
		if s.hasDL {
			fmt.Fprintf(&b, " deadline=%d", s.deadline)
		}
	}
	if s.ready {
		b.WriteString(" ready")
	}
	if s.ctxDone {
		b.WriteString(" ctxDone")
	}
	if s.owed {
		b.WriteString(" owed")
	}
	if s.adv != 0 {
		fmt.Fprintf(&b, " advancing#%d to %d", s.adv, s.hi)
	}
	if s.closed {
		b.WriteString(" closed")
	}
	return b.String()
}

// levelOf returns the operation's WatchLevel on key, and whether it is
// Leveled.
func (s xstate) levelOf(key int) (int64, bool) {
	if !s.levels.leveled {
		return 0, false
	}
	for i := range s.levels.n {
		if s.levels.keys[i] == key {
			return s.levels.lvls[i], true
		}
	}
	return 0, false
}

// silent returns s and the states the operation can reach from it without
// an event of its own: for an operation under a SharedLock, a deferred
// park run by whoever unlocks, and the end of a park (watched, timeout
// added), both of which happen on goroutines the test does not see.
func silent(s xstate) []xstate {
	out := []xstate{s}
	if !s.shared {
		return out
	}
	if s.st == stDeferred {
		p := s
		p.st = stPending
		if p.ready || p.ctxDone {
			p.owed = true
		}
		out = append(out, p)
		s = p
	}
	if s.st == stPending && !s.armed {
		for _, a := range s.reads() {
			a.armed = true
			if a.resetInP {
				a.hasDL, a.deadline, a.resetInP = true, a.clock+max(a.resetD, 0), false
			}
			if !a.hasDL {
				a.hasDL, a.deadline = true, a.clock+max(a.timeout, 0)
			}
			out = append(out, a)
		}
	}
	return out
}

// pstep is the model's step for one partition.
func pstep(state any, input any, output any) []any {
	s := state.(xstate)
	in := input.(pin)
	out := output.(pout)
	if in.kind == evInit {
		if s.init {
			return nil
		}
		s.init, s.shared, s.timeout, s.levels, s.late = true, in.shared, in.d, in.levels, in.lateReset
		return []any{s}
	}
	if !s.init {
		return nil
	}
	var next []any
	for _, c := range silent(s) {
		if n, ok := pstep1(c, in, out); ok {
			next = append(next, n...)
		}
	}
	return next
}

// complete moves a pending operation to done.
func complete(s xstate) xstate {
	s.st, s.armed, s.owed = stDone, false, false
	return s
}

// reads returns s with the clock read at each time a call can find it at:
// any from clock to hi while an Advance is under way.
func (s xstate) reads() []xstate {
	out := make([]xstate, 0, s.hi-s.clock+1)
	for c := s.clock; c <= s.hi; c++ {
		n := s
		n.clock = c
		out = append(out, n)
	}
	return out
}

func pstep1(s xstate, in pin, out pout) ([]any, bool) {
	one := func(n xstate) ([]any, bool) { return []any{n}, true }
	oneIf := func(n xstate, ok bool) ([]any, bool) { return []any{n}, ok }
	switch in.kind {
	case evPark:
		switch out.err {
		case errFull:
			// countModel checks the bound. ErrFull is decided after the
			// operation is looked at: a first look without its lock
			// refuses a second park (ErrAlreadyWatched), and the place is
			// taken, or refused, only once the operation is seen
			// parkable under its lock (lifecycle.Park; DeferPark for a
			// deferred park). A refusal changes nothing, so this step
			// accepts it in any state and leaves the bound to countModel.
			return one(s)
		case errShutdown:
			return oneIf(s, s.closed)
		case errAlready:
			// Parked, completed, cancelled, or a park of it deferred.
			return oneIf(s, s.st != stFresh)
		case errNone:
			if s.st != stFresh || s.closed {
				return nil, false
			}
			p := s
			p.st = stPending
			if p.ready || p.ctxDone {
				// Its first TryComplete comes after the park and sees
				// it ready; a context that has ended completes it.
				p.owed = true
			}
			next := []any{p}
			if s.shared && !out.ok {
				d := s
				d.st = stDeferred
				next = append(next, d)
			}
			return next, true
		}
		return nil, false
	case evArm:
		switch s.st {
		case stPending:
			if s.armed {
				return nil, false
			}
			var next []any
			for _, s := range s.reads() {
				s.armed = true
				if s.resetInP {
					s.hasDL, s.deadline, s.resetInP = true, s.clock+max(s.resetD, 0), false
				}
				if !s.hasDL {
					// The park's Add measures the deadline. A reset made
					// during the park has fixed it already, inside that
					// reset's call (docs/purgatory.md, "Keeping an
					// operation alive").
					s.hasDL, s.deadline = true, s.clock+max(in.d, 0)
				}
				next = append(next, s)
			}
			return next, true
		case stDone, stCancelled:
			return one(s) // completed (or cancelled) during the park
		}
		return nil, false
	case evSatisfy:
		s.ready = true
		return one(s)
	case evCheck, evCheckUpTo:
		if in.kind == evCheckUpTo {
			l, leveled := s.levelOf(in.key)
			if !leveled || l > in.level {
				return one(s) // not tried by this check
			}
		}
		if (s.st == stPending || s.st == stDeferred) && s.ready {
			s.owed = true
		}
		return one(s)
	case evFC:
		if out.ok {
			switch s.st {
			case stFresh, stDeferred, stPending, stCancelled:
				return one(complete(s))
			}
			return nil, false
		}
		return oneIf(s, s.st == stDone)
	case evReset:
		if out.ok {
			if s.st != stPending || s.closed {
				return nil, false
			}
			if s.late && !s.armed {
				s.resetInP, s.resetD = true, in.d
				return one(s)
			}
			var next []any
			for _, s := range s.reads() {
				s.hasDL, s.deadline = true, s.clock+max(in.d, 0)
				next = append(next, s)
			}
			return next, true
		}
		// False also once its deadline has come: on a timer of package
		// timer the reset finds the entry fired, and the expiry under
		// way decides (docs/purgatory.md, "Keeping an operation alive").
		if s.st != stPending || s.closed {
			return one(s)
		}
		if s.hasDL && s.deadline <= s.hi {
			s.clock = max(s.clock, s.deadline)
			return one(s)
		}
		return nil, false
	case evCFK:
		if s.st == stPending {
			s.claims |= 1 << (in.idx % 64)
			if s.armed {
				s.owed = true
			}
		}
		return one(s)
	case evForKeyDone:
		return oneIf(complete(s), s.st == stPending && s.claims&(1<<(in.idx%64)) != 0)
	case evCancelKey:
		if s.st == stPending {
			s.cclaims |= 1 << (in.idx % 64)
			if s.armed {
				s.owed = true
			}
		}
		return one(s)
	case evCancelled:
		if s.st != stPending || s.cclaims&(1<<(in.idx%64)) == 0 {
			return nil, false
		}
		s.st, s.armed, s.owed = stCancelled, false, false
		return one(s)
	case evCtxCancel:
		s.ctxDone = true
		if s.st == stPending {
			s.owed = true
		}
		return one(s)
	case evCtxDone:
		return oneIf(complete(s), s.st == stPending && s.ctxDone)
	case evTDone:
		return oneIf(complete(s), s.st == stPending && s.ready)
	case evExpired:
		// At its deadline: the Advance that passes it stops there.
		if s.st != stPending || !s.hasDL || s.deadline > s.hi {
			return nil, false
		}
		s.clock = max(s.clock, s.deadline)
		return one(complete(s))
	case evAdvStart:
		if s.adv != 0 {
			return nil, false
		}
		s.adv, s.hi = in.idx, s.clock+in.d
		return one(s)
	case evAdvEnd:
		// The Advance has expired every operation due by its end, unless
		// a completion is under way.
		if s.adv != in.idx || s.st == stPending && s.hasDL && s.deadline <= s.hi {
			return nil, false
		}
		s.clock, s.adv = s.hi, 0
		return one(s)
	case evRest:
		return oneIf(s, s.st != stDeferred && !(s.st == stPending && s.owed))
	case evShutStart:
		s.closed = true
		return one(s)
	case evShutDone:
		return oneIf(complete(s), s.st == stPending && s.closed)
	case evShutEnd:
		return oneIf(s, s.st != stPending && s.st != stDeferred)
	}
	return nil, false
}

func describePin(in pin) string {
	switch in.kind {
	case evInit:
		return fmt.Sprintf("init(op%d timeout=%d shared=%v levels=%v)", in.op, in.d, in.shared, in.levels)
	case evPark, evArm, evSatisfy, evFC, evCtxCancel, evCtxDone, evTDone, evExpired, evShutDone:
		return fmt.Sprintf("%v(op%d)", in.kind, in.op)
	case evReset:
		return fmt.Sprintf("reset(op%d, %d)", in.op, in.d)
	case evCheck:
		return fmt.Sprintf("check(k%d)", in.key)
	case evCheckUpTo:
		return fmt.Sprintf("checkUpTo(k%d, %d)", in.key, in.level)
	case evCFK, evCancelKey:
		return fmt.Sprintf("%v#%d(k%d)", in.kind, in.idx, in.key)
	case evForKeyDone, evCancelled:
		return fmt.Sprintf("%v(op%d by #%d)", in.kind, in.op, in.idx)
	case evAdvStart:
		return fmt.Sprintf("advance#%d(%d)", in.idx, in.d)
	case evAdvEnd:
		return fmt.Sprintf("advanceEnd#%d", in.idx)
	}
	return in.kind.String()
}

func describePout(in pin, out pout) string {
	switch in.kind {
	case evPark:
		if out.err != errNone {
			return errNames[out.err]
		}
		return fmt.Sprint(out.ok)
	case evFC, evReset:
		return fmt.Sprint(out.ok)
	}
	return ""
}

// purgatoryModel is the model of one operation's partition.
func purgatoryModel(parts [][]porcupine.Operation) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func([]porcupine.Operation) [][]porcupine.Operation { return parts },
		Init:      func() []any { return []any{xstate{}} },
		Step:      pstep,
		Equal:     func(a, b any) bool { return a.(xstate) == b.(xstate) },
		DescribeOperation: func(input, output any) string {
			in, out := input.(pin), output.(pout)
			if o := describePout(in, out); o != "" {
				return describePin(in) + " -> " + o
			}
			return describePin(in)
		},
		DescribeState: func(state any) string { return state.(xstate).String() },
	}
	return nm.ToModel()
}

// countModel checks WithMaxPending's bound over the whole history: a park
// is refused with ErrFull only while bound operations hold a place. A
// park accepted but deferred to the holder of its SharedLock holds its
// place from the call that accepted it. A departure gives its place back
// within the call (or callback interval) that made it, after the swap
// that completes or cancels the operation: a departure and its giving
// back (evGiveBack, withGiveBacks) are two steps, and between them the
// operation is completed and still holds its place (owing).
type cstate struct {
	// st is each operation's state, one byte an operation (a string so
	// that states compare with ==).
	st      string
	pending int
	held    string // the variant: operations whose refused park holds a place
}

// owes marks, in countModel's state of an operation, a departure whose
// place is not given back yet.
const owes = 8

// withGiveBacks adds, after each event that may be a departure, one that
// gives back its place, over the same interval.
func withGiveBacks(ce []porcupine.Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, 2*len(ce))
	for _, e := range ce {
		out = append(out, e)
		switch in := e.Input.(pin); in.kind {
		case evFC, evTDone, evExpired, evForKeyDone, evCtxDone, evShutDone, evCancelled:
			if in.kind == evFC && !e.Output.(pout).ok {
				continue
			}
			g := e
			g.Input = pin{kind: evGiveBack, op: in.op}
			g.Output = pout{}
			out = append(out, g)
		}
	}
	return out
}

func countModel(nops, bound int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return cstate{st: strings.Repeat(string(rune('0'+stFresh)), nops)} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(cstate), input.(pin), output.(pout)
			set := func(st uint8) cstate {
				b := []byte(s.st)
				b[in.op] = '0' + st
				return cstate{st: string(b), pending: s.pending, held: s.held}
			}
			cur := s.st[in.op] - '0'
			owing := cur >= owes
			cur &^= owes
			// keep sets the operation's state, still owing its place if
			// it was.
			keep := func(st uint8) cstate {
				if owing {
					st |= owes
				}
				return set(st)
			}
			tag := fmt.Sprintf("<%d>", in.op)
			switch in.kind {
			case evGiveBack:
				switch {
				case owing:
					n := set(cur)
					n.pending--
					return true, n
				case cur == stDone || cur == stCancelled:
					// A departure that held no place (a ForceComplete of
					// an operation never accepted), or one given back
					// already by an earlier departure of the operation.
					return true, s
				}
				return false, s // before its departure
			case evHold: // several refused parks of one operation may each hold one
				s.held += tag
				s.pending++
				return true, s
			case evRelease:
				if !strings.Contains(s.held, tag) {
					return false, s
				}
				s.held = strings.Replace(s.held, tag, "", 1)
				s.pending--
				return cur != stFresh, s
			case evPark:
				switch out.err {
				case errFull:
					return s.pending >= bound, s
				case errAlready:
					return cur != stFresh, s
				case errNone:
					if cur != stFresh {
						return false, s
					}
					n := set(stPending)
					n.pending++
					return true, n
				}
				return true, s
			case evFC:
				if !out.ok {
					return cur == stDone, s
				}
				switch cur {
				case stPending:
					return true, set(stDone | owes)
				case stFresh, stCancelled:
					return true, keep(stDone)
				}
				return false, s
			case evTDone, evExpired, evForKeyDone, evCtxDone, evShutDone, evCancelled:
				if cur != stPending {
					return false, s
				}
				st := stDone
				if in.kind == evCancelled {
					st = stCancelled
				}
				return true, set(st | owes)
			}
			return true, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(pin), output.(pout)
			if o := describePout(in, out); o != "" {
				return describePin(in) + " -> " + o
			}
			return describePin(in)
		},
		DescribeState: func(state any) string {
			s := state.(cstate)
			var ps []string
			for i := range len(s.st) {
				switch st := s.st[i] - '0'; {
				case st == stPending:
					ps = append(ps, fmt.Sprintf("op%d", i))
				case st >= owes:
					ps = append(ps, fmt.Sprintf("op%d(%s, owing)", i, stNames[st&^owes]))
				}
			}
			sort.Strings(ps)
			return fmt.Sprintf("places=%d %v", s.pending, ps)
		},
	}
}
