package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis logs each failed dial; the tests that stop Redis make many.
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// call is a request being served by a handler on a goroutine of its own.
type call struct {
	rec  *httptest.ResponseRecorder
	done chan struct{} // closed when the handler has returned
	at   time.Time     // when it returned
}

// start serves req on a new goroutine, as net/http would.
func start(h http.Handler, req *http.Request) *call {
	c := &call{rec: httptest.NewRecorder(), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		h.ServeHTTP(c.rec, req)
		c.at = time.Now()
	}()
	return c
}

func (c *call) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// do serves one request to the end on the caller's goroutine.
func do(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	return rec
}

// newTestServer returns a server whose parked polls are answered when the
// test ends; inside a bubble, that is before the bubble checks for
// goroutines left behind.
func newTestServer(t *testing.T, maxPending int) *server {
	t.Helper()
	s, err := newServer(config{maxPending: maxPending})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.polls.Shutdown(context.Background())) })
	return s
}

// On the bubble's fake clock a poll is answered 204 exactly at its deadline:
// not a nanosecond before, and not after.
func TestPollTimesOutAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, 0)
		parked := time.Now()
		c := start(s, httptest.NewRequest("GET", "/wait?key=a&timeout=30s", nil))

		time.Sleep(30*time.Second - time.Nanosecond)
		synctest.Wait()
		require.False(t, c.finished(), "answered before its deadline")
		assert.Equal(t, 1, s.polls.NumDelayed())

		<-c.done
		assert.Equal(t, parked.Add(30*time.Second), c.at, "answered at its deadline")
		assert.Equal(t, http.StatusNoContent, c.rec.Code)
		assert.Empty(t, c.rec.Body.String())
		assert.Equal(t, 0, s.polls.NumDelayed())
	})
}

// A notify answers every poll waiting on its key for a version it now
// exceeds, and no other: not those on other keys, nor one waiting past it.
func TestNotifyAnswersEveryWaiterOnItsKeyAndNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, 0)
		var onA, others []*call
		for range 3 {
			onA = append(onA, start(s, httptest.NewRequest("GET", "/wait?key=a&timeout=1m", nil)))
		}
		for _, target := range []string{"/wait?key=b&timeout=1m", "/wait?key=b&after=0", "/wait?key=a&after=1&timeout=1m"} {
			others = append(others, start(s, httptest.NewRequest("GET", target, nil)))
		}
		synctest.Wait()
		require.Equal(t, 6, s.polls.NumDelayed())

		rec := do(s, "POST", "/notify?key=a", "hello")
		require.Equal(t, http.StatusOK, rec.Code)
		assert.JSONEq(t, `{"version":1,"woken":3}`, rec.Body.String())
		synctest.Wait()
		for i, c := range onA {
			require.True(t, c.finished(), "poll %d on a", i)
			assert.Equal(t, http.StatusOK, c.rec.Code)
			assert.JSONEq(t, `{"key":"a","version":1,"value":"hello"}`, c.rec.Body.String())
		}
		for i, c := range others {
			assert.False(t, c.finished(), "poll %d on another key or version", i)
		}
		assert.Equal(t, 3, s.polls.NumDelayed())

		// A version already past after is answered at once.
		rec = do(s, "GET", "/wait?key=a&after=0&timeout=1m", "")
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.JSONEq(t, `{"key":"a","version":1,"value":"hello"}`, rec.Body.String())

		rec = do(s, "POST", "/notify?key=a", "again")
		assert.JSONEq(t, `{"version":2,"woken":1}`, rec.Body.String())
		synctest.Wait()
		assert.True(t, others[2].finished())
		assert.JSONEq(t, `{"key":"a","version":2,"value":"again"}`, others[2].rec.Body.String())
		assert.Equal(t, 2, s.polls.NumDelayed())
	})
}

// close answers each parked poll with 503 and Retry-After, and refuses
// later ones the same way.
func TestCloseAnswersParkedPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, 0)
		var calls []*call
		for _, key := range []string{"a", "a", "b"} {
			calls = append(calls, start(s, httptest.NewRequest("GET", "/wait?key="+key+"&timeout=1m", nil)))
		}
		synctest.Wait()
		require.Equal(t, 3, s.polls.NumDelayed())

		require.NoError(t, s.polls.Shutdown(context.Background()))
		for _, c := range append(calls, start(s, httptest.NewRequest("GET", "/wait?key=a", nil))) {
			<-c.done
			assert.Equal(t, http.StatusServiceUnavailable, c.rec.Code)
			assert.Equal(t, "1", c.rec.Header().Get("Retry-After"))
		}
		assert.Equal(t, 0, s.polls.NumDelayed())
		// Notifies still store; they have nobody to wake.
		assert.JSONEq(t, `{"version":1,"woken":0}`, do(s, "POST", "/notify?key=a", "x").Body.String())
	})
}

func TestBadInputIsRefused(t *testing.T) {
	s := newTestServer(t, 0)
	for _, target := range []string{
		"/wait",
		"/wait?key=",
		"/wait?key=a&after=-1",
		"/wait?key=a&after=one",
		"/wait?key=a&timeout=5",
		"/wait?key=a&timeout=soon",
		"/wait?key=a&timeout=-1s",
		"/wait?key=a&timeout=6m",
	} {
		rec := do(s, "GET", target, "")
		assert.Equal(t, http.StatusBadRequest, rec.Code, target)
	}
	assert.Equal(t, http.StatusBadRequest, do(s, "POST", "/notify", "x").Code)
	assert.Equal(t, http.StatusRequestEntityTooLarge, do(s, "POST", "/notify?key=a", strings.Repeat("x", maxValueBytes+1)).Code)
	assert.Equal(t, http.StatusMethodNotAllowed, do(s, "GET", "/notify?key=a", "").Code)
	assert.Equal(t, http.StatusMethodNotAllowed, do(s, "POST", "/wait?key=a", "").Code)
	assert.Equal(t, 0, s.polls.NumDelayed())
	assert.JSONEq(t, `{"version":1,"woken":0}`, do(s, "POST", "/notify?key=a", "x").Body.String(),
		"the refused notify stored nothing")
}

// Past WithMaxPending, a poll is refused with 503 and Retry-After instead
// of parked; a place freed by a notify is taken again.
func TestOverloadIsRefusedWithRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, 2)
		a := start(s, httptest.NewRequest("GET", "/wait?key=a&timeout=1m", nil))
		start(s, httptest.NewRequest("GET", "/wait?key=b&timeout=1m", nil))
		synctest.Wait()

		rec := do(s, "GET", "/wait?key=c&timeout=1m", "")
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.Equal(t, 2, s.polls.NumDelayed())

		do(s, "POST", "/notify?key=a", "x")
		<-a.done
		c := start(s, httptest.NewRequest("GET", "/wait?key=c&timeout=1m", nil))
		synctest.Wait()
		assert.False(t, c.finished(), "parked in the place a left")
		assert.Equal(t, 2, s.polls.NumDelayed())
	})
}

// writes is a ResponseWriter that records whether anything was written.
type writes struct {
	*httptest.ResponseRecorder
	wrote bool
}

func (w *writes) WriteHeader(code int) { w.wrote = true; w.ResponseRecorder.WriteHeader(code) }

func (w *writes) Write(p []byte) (int, error) { w.wrote = true; return w.ResponseRecorder.Write(p) }

// A client that hangs up takes its poll out of the purgatory at once: the
// handler, waiting on the request's context beside the poll, completes the
// poll itself at the moment of the hang-up on the bubble's clock, writes
// nothing, and lets go of the poll's key.
func TestHangUpLeavesThePurgatoryAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, 0)
		ctx, hangUp := context.WithCancel(context.Background())
		w := &writes{ResponseRecorder: httptest.NewRecorder()}
		returned := make(chan time.Time)
		go func() {
			s.ServeHTTP(w, httptest.NewRequest("GET", "/wait?key=a&timeout=1m", nil).WithContext(ctx))
			returned <- time.Now()
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 1, s.polls.NumDelayed())

		hungUp := time.Now()
		hangUp()
		assert.Equal(t, hungUp, <-returned, "the handler returns when the client hangs up")
		assert.Equal(t, 0, s.polls.NumDelayed())
		assert.Equal(t, uint64(1), s.polls.Stats().CompletedForKey, "counted as completed with a cause, by Complete")
		assert.False(t, w.wrote, "nothing written for a client that has gone")
		assert.Empty(t, s.keys.m, "no poll holds the key")
		assert.JSONEq(t, `{"version":1,"woken":0}`, do(s, "POST", "/notify?key=a", "x").Body.String())
	})
}

// Hang-ups racing notifies and timeouts: every handler returns, every
// poll the purgatory accepted left it exactly once, an answer is always
// its key's, and no key is left held.
func TestHangUpsRacingNotifiesAndTimeouts(t *testing.T) {
	const polls, keys = 400, 4
	s := newTestServer(t, 0)
	var wg sync.WaitGroup
	recs := make([]*httptest.ResponseRecorder, polls)
	for i := range polls {
		ctx, hangUp := context.WithCancel(context.Background())
		recs[i] = httptest.NewRecorder()
		target := fmt.Sprintf("/wait?key=k%d&timeout=%dms", i%keys, 20+i%30)
		wg.Go(func() { s.ServeHTTP(recs[i], httptest.NewRequest("GET", target, nil).WithContext(ctx)) })
		if i%2 == 0 {
			wg.Go(func() {
				time.Sleep(time.Duration(i%25) * time.Millisecond)
				hangUp()
			})
		} else {
			defer hangUp()
		}
		if i%40 == 0 {
			do(s, "POST", fmt.Sprintf("/notify?key=k%d", i/40%keys), fmt.Sprint("v", i))
		}
	}
	wg.Wait()
	assert.Equal(t, 0, s.polls.NumDelayed())
	st := s.polls.Stats()
	assert.Equal(t, uint64(polls), st.CompletedEarly+st.Expired+st.CompletedForKey, "each poll left once (a hang-up: Complete)")
	assert.Empty(t, s.keys.m, "no poll holds a key")
	for i, rec := range recs {
		if rec.Code == http.StatusOK && rec.Body.Len() > 0 {
			var a struct{ Key string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a), "poll %d", i)
			assert.Equal(t, fmt.Sprint("k", i%keys), a.Key, "poll %d", i)
		}
	}
}
