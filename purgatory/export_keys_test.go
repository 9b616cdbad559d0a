package purgatory

import "github.com/purgatory-go/purgatory/operation"

// WatchedKeys returns the number of keys p's watchers hold a list for,
// idle lists included.
func WatchedKeys[K comparable, T operation.DelayedOperation](p *Purgatory[K, T]) int {
	return p.watchers.Keys()
}
