// Package nilcheck tells a nil interface from one holding a nil pointer,
// for the packages that take a user's value as an interface and must refuse
// a typed nil before calling a method on it.
package nilcheck

import "reflect"

// IsNil reports whether v is nil or holds a nil pointer. A typed nil in an
// interface passes a v == nil check and panics on its first method call.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}
