package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/timer"
)

// waitUntil returns once cond holds. The test's -timeout bounds the wait;
// no duration is assumed.
func waitUntil(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

type answer struct {
	code int
	msgs []Message
	err  error
}

// get makes a request on a goroutine of its own and hands back its answer.
func get(c *http.Client, url string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		resp, err := c.Get(url)
		if err != nil {
			ch <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var a struct{ Messages []Message }
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode == http.StatusOK {
			err = json.Unmarshal(body, &a)
		}
		ch <- answer{code: resp.StatusCode, msgs: a.Messages, err: err}
	}()
	return ch
}

// Over a loopback port, served as main serves: a parked receive is
// answered by a send, and stopping the server answers the receives still
// parked with no messages before serve returns.
func TestServeOverHTTP(t *testing.T) {
	s, err := newServer(config{})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String() + "/queues/jobs/messages"
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, ln, s) }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	first := get(c, url+"?wait=1m")
	waitUntil(func() bool { return s.svc.p.NumDelayed() == 1 })
	resp, err := c.Post(url+"?delay=0s", "text/plain", strings.NewReader("hello"))
	require.NoError(t, err)
	resp.Body.Close()
	a := <-first
	require.NoError(t, a.err)
	require.Len(t, a.msgs, 1)
	assert.Equal(t, "hello", a.msgs[0].Body)

	req, err := http.NewRequest("DELETE", url+"/"+a.msgs[0].Receipt, nil)
	require.NoError(t, err)
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)

	var held []<-chan answer
	for range 3 {
		held = append(held, get(c, url+"?wait=5m"))
	}
	waitUntil(func() bool { return s.svc.p.NumDelayed() == 3 })
	stop()
	require.NoError(t, <-served)
	for _, ch := range held {
		a := <-ch
		require.NoError(t, a.err)
		assert.Equal(t, http.StatusOK, a.code)
		assert.Empty(t, a.msgs)
	}
}

// The queue on a timer.MockTimer, as a service's own tests would run it:
// time moves only at Advance, and the delay, the visibility timeout and
// the receive's wait each end exactly at their deadlines, on the test's
// goroutine.
func TestOnAMockTimer(t *testing.T) {
	mt := timer.NewMockTimer()
	s := newTestServer(t, config{timer: mt, noReaper: true})
	q := s.svc.queue("q")
	type result struct {
		msgs []Message
		ok   bool
	}
	receive := func(wait time.Duration) <-chan result {
		n := s.svc.p.NumDelayed()
		ch := make(chan result, 1)
		go func() {
			msgs, ok, err := s.svc.receive(context.Background(), q, 1, 10*time.Second, wait)
			assert.NoError(t, err)
			ch <- result{msgs, ok}
		}()
		waitUntil(func() bool { return s.svc.p.NumDelayed() == n+1 })
		return ch
	}

	_, err := q.send("later", 5*time.Second)
	require.NoError(t, err)
	r := receive(time.Minute)
	mt.Advance(5*time.Second - 1)
	require.Equal(t, 1, s.svc.p.NumDelayed(), "delivered before its delay")
	mt.Advance(1)
	got := <-r
	require.Len(t, got.msgs, 1)
	assert.Equal(t, "1.1", got.msgs[0].Receipt)

	r = receive(time.Minute)
	mt.Advance(10*time.Second - 1)
	require.Equal(t, 1, s.svc.p.NumDelayed(), "visible again before its visibility timeout")
	mt.Advance(1)
	got = <-r
	require.Len(t, got.msgs, 1)
	assert.Equal(t, "1.2", got.msgs[0].Receipt)
	require.ErrorIs(t, q.delete("1.1"), ErrReceipt)
	require.NoError(t, q.delete("1.2"))

	r = receive(30 * time.Second)
	mt.Advance(30*time.Second - 1)
	require.Equal(t, 1, s.svc.p.NumDelayed(), "the wait ended early")
	mt.Advance(1)
	got = <-r
	assert.True(t, got.ok)
	assert.Empty(t, got.msgs)
	assert.Equal(t, 0, mt.Size(), "no task left on the timer")
}
