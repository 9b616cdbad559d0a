package main

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"
)

// entry is a key's value and its version: 0 for no value, and from the
// first notify on, a number that rises with each notify and never names
// two values of the key (memStore counts from 1; redisStore starts each
// key at Redis's clock, README "More than one server").
type entry struct {
	Version uint64
	Value   string
}

var noEntry = &entry{} // version 0: a key nothing was put to, or one forgotten

// answer is the JSON body of a GET /wait answered with e. JSON strings are
// text: a key or value that is not valid UTF-8 would have its bytes
// replaced, so it is sent in base64 instead, as key_base64 or value_base64.
func (e *entry) answer(key string) any {
	var a struct {
		Key         *string `json:"key,omitempty"`
		KeyBase64   []byte  `json:"key_base64,omitempty"`
		Version     uint64  `json:"version"`
		Value       *string `json:"value,omitempty"`
		ValueBase64 []byte  `json:"value_base64,omitempty"`
	}
	a.Version = e.Version
	if utf8.ValidString(key) {
		a.Key = &key
	} else {
		a.KeyBase64 = []byte(key)
	}
	if utf8.ValidString(e.Value) {
		a.Value = &e.Value
	} else {
		a.ValueBase64 = []byte(e.Value)
	}
	return a
}

// A store keeps each key's newest entry where every server using it can
// read it, and tells each of them of every change. memStore is one
// process's; redisStore is shared through Redis. Another bus (Postgres's
// LISTEN/NOTIFY, NATS, a Kafka topic) is a third implementation, and
// nothing else changes (README, "More than one server").
type store interface {
	// put stores value as key's next version, atomically, announces the
	// change to every server's listener, and returns the new entry. If it
	// returns an error, the value is not stored, now or later.
	put(ctx context.Context, key, value string) (*entry, error)
	// get returns the newest entry of each key, noEntry for one never put.
	get(ctx context.Context, keys ...string) ([]*entry, error)
	// listen tells l of the changes announced from now on, until stop is
	// called; stop returns once l will hear nothing more.
	listen(l listener) (stop func())
	// String names the store in logs, 503s and /metrics.
	String() string
}

// A listener hears what a store announces, one call at a time.
type listener interface {
	// changed is told of a change that a put announced.
	changed(key string, e *entry)
	// up is told that every change from now on will be announced, and
	// that changes made before it may have been missed: it reads what
	// it needs with get, and returns an error if it could not. It is
	// told again until it succeeds. lostData says that the store lost
	// its entries since the last up: what the listener kept is no longer
	// what the store holds, even where the store now holds nothing.
	up(ctx context.Context, lostData bool) error
	// lost is told that changes may be missed from now until the next
	// successful up.
	lost(err error)
}

// memStore holds the entries of one server, in memory. It announces
// nothing: the only server that can hear a change is the one that put it,
// and that one checks its polls itself. The zero memStore is empty, keeps
// its keys for ever, and is ready for use.
type memStore struct {
	ttl time.Duration // a key with no put for this long is forgotten; 0: never

	mu    sync.Mutex // guards the fields below; never held while calling into the purgatory
	keys  map[string]memEntry
	floor uint64    // the highest version of a key forgotten: keys start above it
	peak  int       // len(keys) at its largest since the map was last made
	sweep time.Time // when put next looks for keys to forget
}

type memEntry struct {
	e   *entry
	put time.Time
}

func (s *memStore) String() string { return "memory" }

func (s *memStore) put(_ context.Context, key, value string) (*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.forgetLocked(now)
	if s.keys == nil {
		s.keys = make(map[string]memEntry)
	}
	v := s.floor + 1
	if old, ok := s.keys[key]; ok && s.liveLocked(old, now) {
		v = old.e.Version + 1
	} else if ok {
		v = max(v, old.e.Version+1)
	}
	e := &entry{Version: v, Value: value}
	s.keys[key] = memEntry{e, now}
	s.peak = max(s.peak, len(s.keys))
	return e, nil
}

// forgetLocked drops the keys with no put for ttl (get and put treat them
// as gone from then on), a quarter of ttl at most after they are due. Deleting from a Go map frees the entries but
// not the map's own table, so once the map holds less than half of what
// it held at its largest, it is copied into one sized for what is left.
// A key put again later starts above every version forgotten, so that no
// version of it names two values.
func (s *memStore) forgetLocked(now time.Time) {
	if s.ttl <= 0 || now.Before(s.sweep) {
		return
	}
	s.sweep = now.Add(s.ttl / 4)
	for k, me := range s.keys {
		if !s.liveLocked(me, now) {
			s.floor = max(s.floor, me.e.Version)
			delete(s.keys, k)
		}
	}
	if len(s.keys) < s.peak/2 {
		m := make(map[string]memEntry, len(s.keys))
		for k, me := range s.keys {
			m[k] = me
		}
		s.keys, s.peak = m, len(m)
	}
}

// liveLocked reports whether me is not yet due to be forgotten.
func (s *memStore) liveLocked(me memEntry, now time.Time) bool {
	return s.ttl <= 0 || now.Sub(me.put) < s.ttl
}

func (s *memStore) get(_ context.Context, keys ...string) ([]*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	es := make([]*entry, len(keys))
	for i, key := range keys {
		es[i] = noEntry
		if me, ok := s.keys[key]; ok && s.liveLocked(me, now) {
			es[i] = me.e
		}
	}
	return es, nil
}

// listen says up once: in one process, nothing is ever missed.
func (s *memStore) listen(l listener) (stop func()) {
	_ = l.up(context.Background(), false)
	return func() {}
}
