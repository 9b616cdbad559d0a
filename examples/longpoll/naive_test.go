package main

import (
	"cmp"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// naiveServer is the same /wait and /notify written the way Go programs
// usually write a long poll, without the library: a channel per key that
// each notify closes and replaces, and a select on it, a time.After and the
// request's context per poll. bench_test.go measures the two side by side.
type naiveServer struct {
	mu     sync.Mutex // guards keys
	keys   map[string]*naiveKey
	parked atomic.Int64 // polls in their select, for the benchmarks to wait on
	mux    http.ServeMux
}

type naiveKey struct {
	entry
	changed chan struct{} // closed when entry next changes
}

func newNaiveServer() *naiveServer {
	s := &naiveServer{keys: make(map[string]*naiveKey)}
	s.mux.HandleFunc("GET /wait", s.wait)
	s.mux.HandleFunc("POST /notify", s.notify)
	return s
}

func (s *naiveServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// keyLocked returns key's state, adding it if it is new. The caller holds s.mu.
func (s *naiveServer) keyLocked(key string) *naiveKey {
	k := s.keys[key]
	if k == nil {
		k = &naiveKey{changed: make(chan struct{})}
		s.keys[key] = k
	}
	return k
}

func (s *naiveServer) wait(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("key")
	after, aerr := strconv.ParseUint(cmp.Or(q.Get("after"), "0"), 10, 64)
	timeout, terr := time.ParseDuration(cmp.Or(q.Get("timeout"), defaultTimeout))
	if key == "" || aerr != nil || terr != nil || timeout < 0 || timeout > maxTimeout {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	expired := time.After(timeout)
	for {
		s.mu.Lock()
		k := s.keyLocked(key)
		e, changed := k.entry, k.changed
		s.mu.Unlock()
		if e.Version > after {
			writeJSON(w, e.answer(key))
			return
		}
		s.parked.Add(1)
		select {
		case <-changed:
			s.parked.Add(-1)
		case <-expired:
			s.parked.Add(-1)
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			s.parked.Add(-1)
			return
		}
	}
}

func (s *naiveServer) notify(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		http.Error(w, "key is required", http.StatusBadRequest)
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValueBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	k := s.keyLocked(key)
	k.Version++
	k.Value = string(value)
	version := k.Version
	close(k.changed)
	k.changed = make(chan struct{})
	s.mu.Unlock()
	writeJSON(w, map[string]any{"version": version})
}

// The naive server answers as the real one does, so that the benchmarks
// compare like with like.
func TestNaiveServerAgrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newNaiveServer()
		parked := time.Now()
		timesOut := start(s, httptest.NewRequest("GET", "/wait?key=b&timeout=30s", nil))
		var onA []*call
		for range 3 {
			onA = append(onA, start(s, httptest.NewRequest("GET", "/wait?key=a&timeout=1m", nil)))
		}
		synctest.Wait()
		require.Equal(t, int64(4), s.parked.Load())

		assert.JSONEq(t, `{"version":1}`, do(s, "POST", "/notify?key=a", "hello").Body.String())
		for _, c := range onA {
			<-c.done
			assert.JSONEq(t, `{"key":"a","version":1,"value":"hello"}`, c.rec.Body.String())
		}
		<-timesOut.done
		assert.Equal(t, parked.Add(30*time.Second), timesOut.at)
		assert.Equal(t, http.StatusNoContent, timesOut.rec.Code)
		assert.Equal(t, int64(0), s.parked.Load())
	})
}
