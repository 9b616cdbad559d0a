package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// messages decodes a finished receive's answer.
func (c *call) messages(t *testing.T) []Message {
	t.Helper()
	<-c.done
	require.Equal(t, http.StatusOK, c.rec.Code, c.rec.Body.String())
	return decode(t, c.rec)
}

func decode(t *testing.T, rec *httptest.ResponseRecorder) []Message {
	t.Helper()
	var a struct{ Messages []Message }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a), rec.Body.String())
	require.NotNil(t, a.Messages, "an empty answer is [], not null")
	return a.Messages
}

// do serves one request to the end on the caller's goroutine.
func do(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	return rec
}

// receiveNow serves a receive to the end (it must not park).
func receiveNow(t *testing.T, h http.Handler, target string) []Message {
	t.Helper()
	rec := do(h, "GET", target, "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return decode(t, rec)
}

func send(t *testing.T, h http.Handler, target, body string) string {
	t.Helper()
	rec := do(h, "POST", target, body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var a struct{ ID string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a))
	return a.ID
}

func counts(t *testing.T, h http.Handler, q string) string {
	t.Helper()
	return do(h, "GET", "/queues/"+q, "").Body.String()
}

// newTestServer returns a server whose parked receives are answered when
// the test ends; inside a bubble, that is before the bubble checks for
// goroutines left behind.
func newTestServer(t *testing.T, c config) *server {
	t.Helper()
	s, err := newServer(c)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.svc.shutdown(context.Background())) })
	return s
}

// parked starts a receive and returns once it is parked: the bubble is
// idle and one more receive waits in the purgatory. Receives started one
// after another this way are parked in that order.
func parked(t *testing.T, s *server, target string) *call {
	t.Helper()
	n := s.svc.p.NumDelayed()
	c := start(s, httptest.NewRequest("GET", target, nil))
	synctest.Wait()
	require.Equal(t, n+1, s.svc.p.NumDelayed(), "parked")
	return c
}

// A receive that finds nothing is answered with no messages exactly at
// the end of its wait: not a nanosecond before.
func TestWaitEndsEmptyAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		begun := time.Now()
		c := parked(t, s, "/queues/q/messages?wait=20s")

		time.Sleep(20*time.Second - time.Nanosecond)
		synctest.Wait()
		require.False(t, c.finished(), "answered before its wait ended")

		assert.Empty(t, c.messages(t))
		assert.Equal(t, begun.Add(20*time.Second), c.at)
		assert.Equal(t, 0, s.svc.p.NumDelayed())

		// The default wait is 20s too; wait=0 answers at once.
		assert.Empty(t, receiveNow(t, s, "/queues/q/messages?wait=0s"))
	})
}

// A delayed message is visible exactly when its delay ends: a receive
// parked meanwhile gets it then, and not before.
func TestDelayedMessageIsVisibleAtItsDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		sent := time.Now()
		id := send(t, s, "/queues/q/messages?delay=5s", "later")
		assert.JSONEq(t, `{"visible":0,"in_flight":0,"delayed":1}`, counts(t, s, "q"))
		c := parked(t, s, "/queues/q/messages?wait=1m")

		time.Sleep(5*time.Second - time.Nanosecond)
		synctest.Wait()
		require.False(t, c.finished(), "delivered before its delay ended")

		got := c.messages(t)
		assert.Equal(t, sent.Add(5*time.Second), c.at)
		assert.Equal(t, []Message{{ID: id, Body: "later", Receipt: id + ".1", Receives: 1}}, got)
		assert.JSONEq(t, `{"visible":0,"in_flight":1,"delayed":0}`, counts(t, s, "q"))
	})
}

// A message whose visibility timeout passes before it is deleted is
// visible again at that moment: the receive parked longest gets it, with a
// new receipt, and the old receipt no longer deletes it.
func TestLapsedVisibilityRedeliversWithNewReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		id := send(t, s, "/queues/q/messages", "job")
		first := receiveNow(t, s, "/queues/q/messages?visibility=10s")
		require.Len(t, first, 1)
		received := time.Now()
		next := parked(t, s, "/queues/q/messages?wait=1m")

		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		require.False(t, next.finished(), "visible again before its visibility timeout")
		assert.JSONEq(t, `{"visible":0,"in_flight":1,"delayed":0}`, counts(t, s, "q"))

		again := next.messages(t)
		assert.Equal(t, received.Add(10*time.Second), next.at)
		assert.Equal(t, []Message{{ID: id, Body: "job", Receipt: id + ".2", Receives: 2}}, again)
		assert.Equal(t, http.StatusGone, do(s, "DELETE", "/queues/q/messages/"+first[0].Receipt, "").Code)
		assert.Equal(t, http.StatusNoContent, do(s, "DELETE", "/queues/q/messages/"+again[0].Receipt, "").Code)
		assert.Equal(t, http.StatusGone, do(s, "DELETE", "/queues/q/messages/"+again[0].Receipt, "").Code, "deleted already")
		assert.JSONEq(t, `{"visible":0,"in_flight":0,"delayed":0}`, counts(t, s, "q"))
	})
}

// A receipt stops working at its visibility deadline even where the
// timer's task has not yet made the message visible: here nobody is
// parked, and the delete that finds the deadline passed makes the
// message visible itself.
func TestReceiptExpiresAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		send(t, s, "/queues/q/messages", "job")
		got := receiveNow(t, s, "/queues/q/messages?visibility=3s")
		time.Sleep(3*time.Second - time.Nanosecond)
		assert.Equal(t, http.StatusNoContent,
			do(s, "POST", "/queues/q/messages/"+got[0].Receipt+"/visibility?timeout=3s", "").Code,
			"still in flight a nanosecond before")
		time.Sleep(3 * time.Second)
		assert.Equal(t, http.StatusGone, do(s, "DELETE", "/queues/q/messages/"+got[0].Receipt, "").Code)
		assert.JSONEq(t, `{"visible":1,"in_flight":0,"delayed":0}`, counts(t, s, "q"))
	})
}

// Changing a message's visibility moves its deadline, later or earlier,
// from the moment of the change; zero makes it visible at once and ends
// its receipt.
func TestChangeVisibilityMovesTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		send(t, s, "/queues/q/messages", "job")
		got := receiveNow(t, s, "/queues/q/messages?visibility=10s")
		next := parked(t, s, "/queues/q/messages?wait=1m")

		time.Sleep(5 * time.Second)
		changed := time.Now()
		require.Equal(t, http.StatusNoContent,
			do(s, "POST", "/queues/q/messages/"+got[0].Receipt+"/visibility?timeout=20s", "").Code)
		time.Sleep(20*time.Second - time.Nanosecond)
		synctest.Wait()
		require.False(t, next.finished(), "the old deadline still counted, or the new one came early")
		again := next.messages(t)
		assert.Equal(t, changed.Add(20*time.Second), next.at)
		require.Len(t, again, 1)
		assert.Equal(t, 2, again[0].Receives)
		assert.Equal(t, http.StatusGone,
			do(s, "POST", "/queues/q/messages/"+got[0].Receipt+"/visibility?timeout=1s", "").Code)

		// Earlier: from 1h to 2s.
		r := again[0].Receipt
		require.Equal(t, http.StatusNoContent, do(s, "POST", "/queues/q/messages/"+r+"/visibility?timeout=1h", "").Code)
		require.Equal(t, http.StatusNoContent, do(s, "POST", "/queues/q/messages/"+r+"/visibility?timeout=2s", "").Code)
		third := parked(t, s, "/queues/q/messages?wait=1m")
		changed = time.Now()
		assert.Equal(t, 3, third.messages(t)[0].Receives)
		assert.Equal(t, changed.Add(2*time.Second), third.at)

		// Zero: visible now, to the receive parked longest.
		fourth := parked(t, s, "/queues/q/messages?wait=1m")
		r = third.messages(t)[0].Receipt
		require.Equal(t, http.StatusNoContent, do(s, "POST", "/queues/q/messages/"+r+"/visibility?timeout=0s", "").Code)
		synctest.Wait()
		require.True(t, fourth.finished())
		assert.Equal(t, 4, fourth.messages(t)[0].Receives)
		assert.Equal(t, http.StatusGone, do(s, "DELETE", "/queues/q/messages/"+r, "").Code)
	})
}

// Each message wakes one receive, the one parked longest; the others stay
// parked. A receive takes up to its max of the messages visible.
func TestMessageWakesTheOldestReceiveOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		var rs []*call
		for range 5 {
			rs = append(rs, parked(t, s, "/queues/q/messages?wait=1m&max=3"))
		}
		other := parked(t, s, "/queues/other/messages?wait=1m")
		for i := range 3 {
			id := send(t, s, "/queues/q/messages", "m")
			synctest.Wait()
			for j, c := range rs {
				assert.Equal(t, j <= i, c.finished(), "after message %d, receive %d", i, j)
			}
			got := rs[i].messages(t)
			require.Len(t, got, 1)
			assert.Equal(t, id, got[0].ID)
		}
		assert.False(t, other.finished())
		assert.Equal(t, 3, s.svc.p.NumDelayed())

		// With no receive parked, messages wait; the next receive takes
		// up to its max of them, oldest first.
		s2 := newTestServer(t, config{})
		var ids []string
		for range 4 {
			ids = append(ids, send(t, s2, "/queues/q/messages", "m"))
		}
		got := receiveNow(t, s2, "/queues/q/messages?max=3")
		require.Len(t, got, 3)
		for i, m := range got {
			assert.Equal(t, ids[i], m.ID)
		}
	})
}

// A client that hangs up takes its receive out of the purgatory at once,
// is written nothing, and takes no message: the next message goes to the
// next receive, or stays visible.
func TestHangUpTakesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		ctx, hangUp := context.WithCancel(context.Background())
		w := &writes{ResponseRecorder: httptest.NewRecorder()}
		returned := make(chan time.Time)
		go func() {
			s.ServeHTTP(w, httptest.NewRequest("GET", "/queues/q/messages?wait=1m", nil).WithContext(ctx))
			returned <- time.Now()
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 1, s.svc.p.NumDelayed())

		hungUp := time.Now()
		hangUp()
		assert.Equal(t, hungUp, <-returned, "the handler returns at the hang-up")
		assert.False(t, w.wrote, "nothing written for a client that has gone")
		assert.Equal(t, 0, s.svc.p.NumDelayed())
		assert.Equal(t, uint64(1), s.svc.p.Stats().CompletedForKey, "ended by Complete")
		send(t, s, "/queues/q/messages", "m")
		assert.JSONEq(t, `{"visible":1,"in_flight":0,"delayed":0}`, counts(t, s, "q"))
	})
}

// writes is a ResponseWriter that records whether anything was written.
type writes struct {
	*httptest.ResponseRecorder
	wrote bool
}

func (w *writes) WriteHeader(code int) { w.wrote = true; w.ResponseRecorder.WriteHeader(code) }

func (w *writes) Write(p []byte) (int, error) { w.wrote = true; return w.ResponseRecorder.Write(p) }

// A hang-up that comes after the receive claimed messages does not lose
// them: Complete returns false, and the messages claimed are returned to
// be answered. Here the context has ended before the receive starts and a
// message is visible, so the receive's first TryComplete claims it while
// its select finds both the answer and the hang-up ready; whichever it
// picks, the message must come back.
func TestHangUpAfterAClaimReturnsTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		q := s.svc.queue("q")
		ctx, hangUp := context.WithCancel(context.Background())
		hangUp()
		for i := range 200 {
			id, err := q.send("m", 0)
			require.NoError(t, err)
			msgs, ok, err := s.svc.receive(ctx, q, 1, time.Minute, time.Minute)
			require.NoError(t, err)
			require.True(t, ok, "round %d: claimed, so answered", i)
			require.Len(t, msgs, 1)
			assert.Equal(t, id, msgs[0].ID)
			require.NoError(t, q.delete(msgs[0].Receipt))
		}
		assert.Equal(t, uint64(0), s.svc.p.Stats().CompletedForKey)
	})
}

// Shutdown answers every parked receive at once with no messages, and
// refuses later receives and sends with 503 and Retry-After.
func TestShutdownAnswersParkedReceives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		var rs []*call
		for _, q := range []string{"a", "a", "b"} {
			rs = append(rs, parked(t, s, "/queues/"+q+"/messages?wait=1m"))
		}
		stopped := time.Now()
		require.NoError(t, s.svc.shutdown(context.Background()))
		for _, c := range rs {
			assert.Empty(t, c.messages(t))
			assert.Equal(t, stopped, c.at)
		}
		assert.Equal(t, uint64(3), s.svc.p.Stats().Shutdown)
		for _, rec := range []*httptest.ResponseRecorder{
			do(s, "GET", "/queues/a/messages?wait=1m", ""),
			do(s, "POST", "/queues/a/messages", "m"),
			do(s, "POST", "/queues/a/messages?delay=1s", "m"),
		} {
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		}
	})
}

// Past -max-pending, a receive is refused with 503 instead of parked.
func TestOverloadIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{maxPending: 2})
		parked(t, s, "/queues/a/messages?wait=1m")
		parked(t, s, "/queues/b/messages?wait=1m")
		rec := do(s, "GET", "/queues/c/messages?wait=1m", "")
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.Equal(t, 2, s.svc.p.NumDelayed())
	})
}

func TestBadInputIsRefused(t *testing.T) {
	s := newTestServer(t, config{})
	for _, c := range []struct{ method, target string }{
		{"GET", "/queues/a.b/messages"},
		{"GET", "/queues/" + strings.Repeat("q", 81) + "/messages"},
		{"GET", "/queues/q/messages?max=0"},
		{"GET", "/queues/q/messages?max=11"},
		{"GET", "/queues/q/messages?max=x"},
		{"GET", "/queues/q/messages?wait=6m"},
		{"GET", "/queues/q/messages?wait=-1s"},
		{"GET", "/queues/q/messages?visibility=13h"},
		{"GET", "/queues/q/messages?visibility=soon"},
		{"POST", "/queues/q/messages?delay=16m"},
		{"POST", "/queues/q/messages?delay=5"},
		{"POST", "/queues/q/messages/1.1/visibility"},
		{"POST", "/queues/q/messages/1.1/visibility?timeout=-1s"},
		{"DELETE", "/queues/q!/messages/1.1"},
	} {
		assert.Equal(t, http.StatusBadRequest, do(s, c.method, c.target, "").Code, c.method+" "+c.target)
	}
	assert.Equal(t, http.StatusBadRequest, do(s, "POST", "/queues/q/messages", strings.Repeat("x", maxBodyBytes+1)).Code)
	for _, r := range []string{"1.1", "x", "1", "1.x", "1.-1", "99.1"} {
		assert.Equal(t, http.StatusGone, do(s, "DELETE", "/queues/q/messages/"+r, "").Code, r)
	}
	assert.Equal(t, http.StatusMethodNotAllowed, do(s, "PUT", "/queues/q/messages", "").Code)
	assert.JSONEq(t, `{"visible":0,"in_flight":0,"delayed":0}`, counts(t, s, "q"), "nothing stored")
	assert.Equal(t, 0, s.svc.p.NumDelayed())
}

// A queue is kept while a request holds it or it holds a message, and
// dropped after: names used once cost nothing once their messages are
// gone.
func TestQueuesGoWhenNothingHoldsThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, config{})
		queues := func() int {
			s.svc.mu.Lock()
			defer s.svc.mu.Unlock()
			return len(s.svc.queues)
		}
		assert.JSONEq(t, `{"visible":0,"in_flight":0,"delayed":0}`, counts(t, s, "looked-at"))
		assert.Zero(t, queues(), "a look made it and let it go")

		c := parked(t, s, "/queues/q/messages?wait=1m&visibility=10s")
		assert.Equal(t, 1, queues(), "a parked receive holds it")
		send(t, s, "/queues/q/messages", "m")
		got := c.messages(t)
		assert.Equal(t, 1, queues(), "a message in flight holds it")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Equal(t, 1, queues(), "visible again after its visibility timeout: still held")
		m := receiveNow(t, s, "/queues/q/messages?wait=0s")
		require.Len(t, m, 1)
		assert.Equal(t, got[0].ID, m[0].ID)
		assert.Equal(t, http.StatusNoContent, do(s, "DELETE", "/queues/q/messages/"+m[0].Receipt, "").Code)
		assert.Zero(t, queues(), "deleted: nothing holds it")

		send(t, s, "/queues/later/messages?delay=5s", "x")
		assert.Equal(t, 1, queues(), "a delayed message holds it")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		m = receiveNow(t, s, "/queues/later/messages?wait=0s")
		require.Len(t, m, 1)
		do(s, "DELETE", "/queues/later/messages/"+m[0].Receipt, "")
		assert.Zero(t, queues())
	})
}
