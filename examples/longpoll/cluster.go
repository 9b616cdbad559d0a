package main

import (
	"context"
	"flag"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The server is its store's listener: the store calls these one at a time.

func (s *server) changed(key string, e *entry) { s.heard(key, e) }

// up reads the entry of every key that polls hold, which may have changed
// while nothing was heard, before new polls may park again: a poll whose
// key moved on meanwhile is answered now rather than at its timeout.
//
// If the store lost its data, a key it holds nothing for any more is
// forgotten too: its record goes back to no value, so that a new poll is
// not answered with a value the store no longer has, and the polls held
// on it wait for its next notify, whose version is above every earlier
// one (redis.go). reading keeps handlers' reads of the store, which may
// predate the loss, from landing in the records meanwhile.
func (s *server) up(ctx context.Context, lostData bool) error {
	s.reading.Lock()
	defer s.reading.Unlock()
	held := s.keys.held()
	names := make([]string, len(held))
	before := make([]*entry, len(held))
	for i, k := range held {
		names[i], before[i] = k.name, k.newest.Load()
	}
	es, err := s.store.get(ctx, names...)
	if err != nil {
		return err
	}
	for i, k := range held {
		if lostData && es[i].Version == 0 {
			k.newest.CompareAndSwap(before[i], noEntry)
		}
		s.advance(k, es[i])
	}
	if lostData {
		s.log.Printf("longpoll: %v lost its data: read again the %d keys polls wait on", s.store, len(held))
	}
	s.listen.Store(true)
	if s.state == -1 {
		s.log.Printf("longpoll: hearing %v again: polls may park; read the %d keys polls wait on", s.store, len(held))
	}
	s.state = 1
	return nil
}

// lost stops new polls from parking until the next up: they would wait on
// entries that nothing keeps fresh. Parked polls wait on, for an answer up
// finds or their timeouts. The first failure is logged too, so that a
// server started with a wrong address says so.
func (s *server) lost(err error) {
	s.listen.Store(false)
	if s.state != -1 {
		s.state = -1
		s.log.Printf("longpoll: not hearing %v (%v): refusing polls with 503 until it is back", s.store, err)
	}
}

// storeUp is /metrics' longpoll_store_up, which names the store: a server
// given a wrong -redis address says which, and that it is not up.
func (s *server) storeUp() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "longpoll_store_up",
		Help:        "1 while the store is reachable and its changes are heard (polls may park), 0 otherwise.",
		ConstLabels: prometheus.Labels{"store": s.store.String()},
	}, func() float64 {
		if s.listen.Load() {
			return 1
		}
		return 0
	})
}

// storeFlags declares the flags that choose the store and tune it, and
// returns what makes it once they are parsed: in memory, or with -redis
// on a Redis that other servers share.
func storeFlags() func() store {
	addr := flag.String("redis", "", "share keys with other servers through the Redis server at this address (empty: this process alone)")
	ttl := flag.Duration("ttl", 24*time.Hour, "a key with no notify for this long is forgotten (0: never)")
	var o redisOptions
	flag.DurationVar(&o.health, "redis-health", defaultHealth,
		"with -redis: a subscription silent this long is pinged, and dropped and made again if the ping is not answered as long")
	flag.DurationVar(&o.timeout, "redis-timeout", defaultRedisTimeout,
		"with -redis: how long a command may take; a notify not stored by then never is")
	return func() store {
		if *addr == "" {
			return &memStore{ttl: *ttl}
		}
		o.ttl = *ttl
		return newRedisStore(*addr, o)
	}
}
