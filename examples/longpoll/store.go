package main

import (
	"cmp"
	"sync"
)

// entry is a key's value and its version, which starts at 0 (no value yet)
// and rises by one with each notify.
type entry struct {
	Version uint64
	Value   string
}

// answer is the JSON body of a GET /wait answered with a new version.
func (e entry) answer(key string) any {
	return struct {
		Key     string `json:"key"`
		Version uint64 `json:"version"`
		Value   string `json:"value"`
	}{key, e.Version, e.Value}
}

// store holds every key's newest entry. Keys are never removed: a server
// that needs to forget keys would drop them here, and nothing else changes.
// The zero store is empty and ready for use.
type store struct {
	mu   sync.Mutex // guards keys; never held while calling into the purgatory
	keys map[string]*entry
}

// get returns key's newest entry: version 0 if it has none.
func (s *store) get(key string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cmp.Or(s.keys[key], noEntry)
}

// put stores value as key's newest entry and returns it.
func (s *store) put(key, value string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = make(map[string]*entry)
	}
	e := &entry{Version: cmp.Or(s.keys[key], noEntry).Version + 1, Value: value}
	s.keys[key] = e
	return e
}
