// Package tasklink is the seam between package timer and the operation
// lifecycle (internal/lifecycle). A delayed operation is a timer entry
// whose Run users must not be able to replace, and whose spare words hold
// the lifecycle's state and the user's operation. Package timer keeps those
// words unexported; this package records where they are and lets the
// lifecycle install the function the timer calls when such an entry
// expires. Nothing here is visible outside the module.
package tasklink

import "unsafe"

// Offsets of the fields of timer.TaskBase that the lifecycle uses. Package
// timer's tests check them against the struct, so a change of layout fails
// there rather than corrupting memory.
const (
	// FlagsOffset is the offset of TaskBase.flags, an atomic.Uint32 the
	// timer never touches.
	FlagsOffset = 4
	// OwnerOffset is the offset of TaskBase.owner, an any holding what the
	// entry belongs to.
	OwnerOffset = 48
	// ExpireOffset is the offset of TaskBase.expire, an int64: the
	// Deadline. The timer computes it for its own tasks; for an entry whose
	// owner is not the Task (a delayed operation) the lifecycle writes it
	// at park, and the timer only reads it.
	ExpireOffset = 32
)

// System returns package timer's system clock (monotonic nanoseconds) and
// a cheap reading of it (stamp), for a purgatory whose timer is not one of
// package timer's: one clock for the whole module. Set by package timer's
// init.
var System func() (now, stamp func() int64)

// OwnDeadline is the bit of TaskBase.flags that says the lifecycle wrote
// TaskBase.expire itself when it parked the operation, from the reading of
// the timer's clock the purgatory hands to Add, and reads it at completion.
// The timer then only reads it: a write would race with that completion.
// (A purgatory whose Timer is not one package timer knows, such as one a
// user wraps around a SystemTimer, cannot tell which clock the timer keeps,
// and leaves the deadline to it.)
const OwnDeadline uint32 = 1 << 9

// MaxDeadline is the latest deadline: 2^62 ns, 146 years after the clock's
// zero (for package timer's system clock, the start of the process). A
// deadline there is never reached.
const MaxDeadline = 1 << 62

// Deadline returns when an entry with delay nanoseconds is due if added at
// now (both on its timer's clock): now+delay, no later than MaxDeadline, and
// now for a delay of zero or less.
func Deadline(delay, now int64) int64 {
	switch {
	case delay <= 0:
		return now
	case now >= MaxDeadline || delay > MaxDeadline-now:
		return max(now, MaxDeadline)
	}
	return now + delay
}

// Run runs an expired entry whose owner is not the Task that embeds it: a
// delayed operation, whose owner slot holds the user's operation. p points
// at the timer.TaskBase. Set once, by package lifecycle's init.
var Run func(p unsafe.Pointer)

// Clock returns, for a timer of package timer (or one it wraps), a
// function that reads the timer's clock, one that reads it more cheaply
// but may be off by a few microseconds (stamp; see internal/tsc), an Add
// that takes a reading of now instead of reading the clock again, and
// whether that clock is the system's; nil and false for any other timer.
// Set by package timer's init. A purgatory calls it once, at New: it reads
// now once per park, for the deadline and the start of the time in
// purgatory, and stamp at the end of that time.
var Clock func(t any) (now, stamp func() int64, addAt func(task any, now int64) error, system bool)

// IsNil reports whether v is nil or holds a nil pointer. A typed nil in an
// interface passes a v == nil check and panics on its first method call.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	// The data word of an interface holding a pointer is the pointer.
	type eface struct{ typ, data unsafe.Pointer }
	return (*eface)(unsafe.Pointer(&v)).data == nil
}
