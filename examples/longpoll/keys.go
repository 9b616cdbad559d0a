package main

import (
	"context"
	"log"
	"sync"
	"sync/atomic"
)

// watchedKey is a key that parked polls wait on, with the newest entry this
// server knows for it. Polls read it in TryComplete without a lock.
type watchedKey struct {
	name   string
	newest atomic.Pointer[entry] // never nil; its Version only rises
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

// The server is its store's listener.

func (s *server) changed(key string, e *entry) { s.heard(key, e) }

// up reads the entry of every key that polls hold, which may have changed
// while nothing was heard, before new polls may park again: a poll whose
// key moved on meanwhile is answered now rather than at its timeout.
func (s *server) up(ctx context.Context) error {
	held := s.keys.held()
	names := make([]string, len(held))
	for i, k := range held {
		names[i] = k.name
	}
	es, err := s.store.get(ctx, names...)
	if err != nil {
		return err
	}
	for i, k := range held {
		s.advance(k, es[i])
	}
	if !s.listen.Swap(true) && s.wasUp {
		log.Printf("longpoll: listening to the store again; read the %d keys polls wait on", len(held))
	}
	s.wasUp = true
	return nil
}

// lost stops new polls from parking until the next up: they would wait on
// entries that nothing keeps fresh. Parked polls wait on, for an answer up
// finds or their timeouts.
func (s *server) lost(err error) {
	if s.listen.Swap(false) {
		log.Printf("longpoll: lost the store (%v): refusing polls until it is back", err)
	}
}
