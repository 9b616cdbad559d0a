package main

import (
	"context"
	"sync"
	"sync/atomic"
)

// watchedKey is a key that parked polls wait on, with the newest entry this
// server knows for it. Polls read it in TryComplete without a lock.
type watchedKey struct {
	name   string
	newest atomic.Pointer[entry] // never nil; its Version only rises, but for up after the store lost its data
	filled atomic.Bool           // newest has been read from the store since the listener was last up
	polls  int                   // polls holding it; guarded by keys.mu
}

// advance makes e the newest entry if it is newer than the one known, and
// reports whether it was: then the polls on the key must be checked. An
// older entry, arriving late, changes nothing.
func (k *watchedKey) advance(e *entry) bool {
	for {
		cur := k.newest.Load()
		if e.Version <= cur.Version {
			return false
		}
		if k.newest.CompareAndSwap(cur, e) {
			return true
		}
	}
}

// keys holds the keys that parked polls wait on: a poll holds its key from
// before it parks until its handler has answered, and a key nobody holds is
// dropped. The zero keys is empty and ready for use.
type keys struct {
	mu sync.Mutex // guards m and each watchedKey's polls
	m  map[string]*watchedKey
}

// hold returns name's watchedKey, counting one more poll on it.
func (ks *keys) hold(name string) *watchedKey {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	k := ks.m[name]
	if k == nil {
		if ks.m == nil {
			ks.m = make(map[string]*watchedKey)
		}
		k = &watchedKey{name: name}
		k.newest.Store(noEntry)
		ks.m[name] = k
	}
	k.polls++
	return k
}

// release counts one poll fewer on k, and forgets k when none is left.
func (ks *keys) release(k *watchedKey) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if k.polls--; k.polls == 0 {
		delete(ks.m, k.name)
	}
}

// held returns the keys that polls hold now.
func (ks *keys) held() []*watchedKey {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	held := make([]*watchedKey, 0, len(ks.m))
	for _, k := range ks.m {
		held = append(held, k)
	}
	return held
}

// advance records e as name's newest entry if a poll holds name and e is
// newer than what it knows, and reports whether it did.
func (ks *keys) advance(name string, e *entry) bool {
	ks.mu.Lock()
	k := ks.m[name]
	ks.mu.Unlock()
	return k != nil && k.advance(e)
}

// heard checks the polls on key, if this server holds it and e is newer
// than the entry it knew, and returns how many it answered.
func (s *server) heard(key string, e *entry) int {
	if !s.keys.advance(key, e) {
		return 0
	}
	return s.polls.CheckAndComplete(key)
}

// advance is heard for a key whose record the caller has.
func (s *server) advance(k *watchedKey, e *entry) {
	if k.advance(e) {
		s.polls.CheckAndComplete(k.name)
	}
}

// fill reads k's entry from the store, for the first poll on a key; a
// poll that held the key meanwhile and parked on an older one is checked
// again. It holds reading so that an up told that the store lost its data
// does not run between the read and the record: the record would then
// keep a value the store no longer has.
func (s *server) fill(ctx context.Context, k *watchedKey) bool {
	s.reading.RLock()
	defer s.reading.RUnlock()
	es, err := s.store.get(ctx, k.name)
	if err != nil {
		return false
	}
	s.advance(k, es[0])
	k.filled.Store(true)
	return true
}
