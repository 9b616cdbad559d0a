package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// live is a server on a loopback port, served by serve as main does.
type live struct {
	s    *server
	url  string
	stop context.CancelFunc
	done chan error // serve's result
}

func startLive(t *testing.T, maxPending int) *live {
	t.Helper()
	return startLiveWith(t, config{maxPending: maxPending})
}

func startLiveWith(t *testing.T, c config) *live {
	t.Helper()
	s, err := newServer(c)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	l := &live{s: s, url: "http://" + ln.Addr().String(), stop: stop, done: make(chan error, 1)}
	go func() { l.done <- serve(ctx, ln, s) }()
	t.Cleanup(func() { l.shutdown(t) })
	return l
}

// shutdown stops the server as SIGINT would; a second call does nothing.
func (l *live) shutdown(t *testing.T) {
	if l.stop != nil {
		l.stop()
		l.stop = nil
		require.NoError(t, <-l.done)
	}
}

// newClient returns a client speaking HTTP/1.1, or HTTP/2 without TLS.
// One process holding both ends of 10,000 HTTP/1.1 connections needs
// 20,000 descriptors, more than the 20,000 a test machine may allow, so the
// large test multiplexes its polls over HTTP/2 as a gateway in front of the
// server would.
func newClient(t *testing.T, h2 bool) *http.Client {
	tr := &http.Transport{}
	if h2 {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// waitUntil returns once cond holds, or fails the test if failed reports an
// error first. The test's -timeout bounds the wait; no duration is assumed.
func waitUntil(t *testing.T, cond func() bool, failed func() error) {
	t.Helper()
	for !cond() {
		if err := failed(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

func noFailure() error { return nil }

// generous bounds each wait of this file: far more than a working server
// takes on a loaded 2-core machine, and a failure rather than a hang when
// a server never gets there.
const generous = 30 * time.Second

// within returns once cond holds, and fails the test if it does not
// within generous.
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(generous); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, generous)
		}
	}
}

// retried serves a request on s, again while s answers 503, as a client
// honouring Retry-After would (a subscription made again after a slow
// ping on a loaded machine refuses polls for a moment, as it should).
func retried(t *testing.T, s *server, method, target, body string) *httptest.ResponseRecorder {
	t.Helper()
	var rec *httptest.ResponseRecorder
	within(t, method+" "+target+" answered other than 503", func() bool {
		rec = do(s, method, target, body)
		return rec.Code != http.StatusServiceUnavailable
	})
	return rec
}

// parkOn parks a poll on s, again while s answers 503, and returns it
// once parked or answered otherwise.
func parkOn(t *testing.T, s *server, target string) *call {
	t.Helper()
	var c *call
	within(t, "a poll parked on "+target, func() bool {
		n := s.polls.NumDelayed()
		c = start(s, httptest.NewRequest("GET", target, nil))
		for !c.finished() && s.polls.NumDelayed() == n {
			time.Sleep(time.Millisecond)
		}
		if c.finished() {
			return c.rec.Code != http.StatusServiceUnavailable
		}
		return true
	})
	return c
}

func notify(t *testing.T, c *http.Client, url, key, value string) (version, woken int) {
	t.Helper()
	resp, err := c.Post(url+"/notify?key="+key, "text/plain", strings.NewReader(value))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got struct{ Version, Woken int }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	return got.Version, got.Woken
}

// 10,000 polls held over loopback on 100 keys: one notify per key answers
// all of them, each exactly once, with its own key's value.
func TestTenThousandPollsOverLoopback(t *testing.T) {
	const polls, keys = 10_000, 100
	l := startLive(t, 0)
	c := newClient(t, true)

	type answer struct {
		Key     string `json:"key"`
		Version int    `json:"version"`
		Value   string `json:"value"`
	}
	answers := make([]answer, polls)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	for i := range polls {
		wg.Go(func() {
			resp, err := c.Get(fmt.Sprintf("%s/wait?key=k%d&timeout=5m", l.url, i%keys))
			if err != nil {
				fail(err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				fail(fmt.Errorf("poll %d: status %s", i, resp.Status))
				return
			}
			if err := json.NewDecoder(resp.Body).Decode(&answers[i]); err != nil {
				fail(fmt.Errorf("poll %d: %v", i, err))
			}
		})
	}
	failed := func() error {
		if e := firstErr.Load(); e != nil {
			return *e
		}
		return nil
	}
	waitUntil(t, func() bool { return l.s.polls.NumDelayed() == polls }, failed)

	total := 0
	for k := range keys {
		version, woken := notify(t, c, l.url, fmt.Sprint("k", k), fmt.Sprint("value of k", k))
		assert.Equal(t, 1, version)
		assert.Equal(t, polls/keys, woken, "key k%d", k)
		total += woken
	}
	wg.Wait()
	require.NoError(t, failed())
	assert.Equal(t, polls, total, "each poll woken once")
	for i, a := range answers {
		key := fmt.Sprint("k", i%keys)
		require.Equal(t, answer{Key: key, Version: 1, Value: "value of " + key}, a, "poll %d", i)
	}
	assert.Equal(t, 0, l.s.polls.NumDelayed())

	resp, err := c.Get(l.url + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `purgatory_completed_early_total{purgatory="LongPoll"} 10000`)
}

// A client that hangs up, over either protocol, takes its poll out of the
// purgatory through the request's context.
func TestHangUpOverLoopback(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			l := startLive(t, 0)
			c := newClient(t, h2)
			ctx, hangUp := context.WithCancel(context.Background())
			req, err := http.NewRequestWithContext(ctx, "GET", l.url+"/wait?key=a&timeout=5m", nil)
			require.NoError(t, err)
			errc := make(chan error, 1)
			go func() {
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			waitUntil(t, func() bool { return l.s.polls.NumDelayed() == 1 }, noFailure)
			hangUp()
			require.ErrorIs(t, <-errc, context.Canceled)
			waitUntil(t, func() bool { return l.s.polls.NumDelayed() == 0 }, noFailure)
		})
	}
}

// Overload over the wire: 503 with Retry-After.
func TestOverloadOverLoopback(t *testing.T) {
	l := startLive(t, 1)
	c := newClient(t, false)
	parked := make(chan int, 1)
	go func() {
		resp, err := c.Get(l.url + "/wait?key=a&timeout=5m")
		if err != nil {
			parked <- 0
			return
		}
		resp.Body.Close()
		parked <- resp.StatusCode
	}()
	waitUntil(t, func() bool { return l.s.polls.NumDelayed() == 1 }, noFailure)
	resp, err := c.Get(l.url + "/wait?key=b&timeout=5m")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	l.shutdown(t)
	assert.Equal(t, http.StatusServiceUnavailable, <-parked, "answered by the shutdown")
}

// Stopping the server answers every parked poll with 503 before serve
// returns: the HTTP server's Shutdown does not wait for their timeouts.
func TestShutdownOverLoopback(t *testing.T) {
	l := startLive(t, 0)
	c := newClient(t, false)
	const polls = 20
	codes := make(chan int, polls)
	for i := range polls {
		go func() {
			resp, err := c.Get(fmt.Sprintf("%s/wait?key=k%d&timeout=5m", l.url, i%3))
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			if resp.Header.Get("Retry-After") == "" {
				codes <- -resp.StatusCode
				return
			}
			codes <- resp.StatusCode
		}()
	}
	waitUntil(t, func() bool { return l.s.polls.NumDelayed() == polls }, noFailure)
	l.shutdown(t)
	for range polls {
		assert.Equal(t, http.StatusServiceUnavailable, <-codes)
	}
}
