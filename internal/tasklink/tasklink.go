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
)

// Run runs an expired entry whose owner is not the Task that embeds it: a
// delayed operation, whose owner slot holds the user's operation. p points
// at the timer.TaskBase. Set once, by package lifecycle's init.
var Run func(p unsafe.Pointer)

// Clock returns, for a timer of package timer (or one it wraps), a
// function that reads the timer's clock and an Add that takes that reading
// instead of reading the clock again; nil for any other timer. Set by
// package timer's init. A purgatory calls it once, at New: it reads the
// clock once per park, for the time in purgatory and the deadline both.
var Clock func(t any) (now func() int64, addAt func(task any, now int64) error)

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
