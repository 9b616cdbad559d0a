package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of this file break what lies between a server and its Redis,
// as a network or an operator would (issue 42), through a proxy
// (proxy_test.go) or by restarting redis-server, and check what clients
// see. Servers check their subscription every 250ms here, not every 5s,
// and give commands 500ms, not 1s.

var quick = redisOptions{health: 250 * time.Millisecond, timeout: 500 * time.Millisecond}

// Issue 42, 1: a server whose subscription goes silent with its connection
// left open (Redis's side closed, this side not told) notices within two
// health periods, subscribes again and reads the keys its polls hold,
// answering the poll whose key changed meanwhile; unable to subscribe
// again, it refuses polls with 503, naming its Redis, until it can. Both
// transitions are logged.
func TestClusterHearsAgainAfterAHalfOpenSubscription(t *testing.T) {
	r := startRedis(t)
	p := startProxy(t, r.addr)
	a, logs := startServer(t, p.addr, quick)
	b, _ := startServer(t, r.addr, quick)
	within(t, "both subscribed", func() bool { return a.listen.Load() && b.listen.Load() })
	held := parkOn(t, a, "/wait?key=k&timeout=1m")

	p.cut()
	v, _ := notified(t, retried(t, b, "POST", "/notify?key=k", "changed"))
	within(t, "the poll held on the cut server answered", held.finished)
	assert.Equal(t, http.StatusOK, held.rec.Code)
	assert.JSONEq(t, answerJSON("k", v, "changed"), held.rec.Body.String())
	assert.Contains(t, logs.String(), "not hearing redis at "+p.addr)

	// Cut again, and new connections refused: deaf, and it knows it.
	p.setRefuse(true)
	p.cut()
	within(t, "the server knows it does not hear", func() bool { return !a.listen.Load() })
	rec := do(a, "GET", "/wait?key=k2&timeout=1m", "")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Contains(t, rec.Body.String(), p.addr)

	p.setRefuse(false)
	within(t, "the server hears again", a.listen.Load)
	again := parkOn(t, a, "/wait?key=k2&timeout=1m")
	v2, _ := notified(t, retried(t, b, "POST", "/notify?key=k2", "heard"))
	within(t, "a poll on the server that hears again answered", again.finished)
	assert.JSONEq(t, answerJSON("k2", v2, "heard"), again.rec.Body.String())
	log := logs.String()
	assert.GreaterOrEqual(t, strings.Count(log, "not hearing redis at "+p.addr), 2, log)
	assert.GreaterOrEqual(t, strings.Count(log, "longpoll: hearing redis at "+p.addr+" again"), 2, log)
}

// Issue 42, 2: a notify answered 503 because its connection stalled is
// not applied when the stall ends and Redis receives it, after newer
// notifies made through another server: Redis refuses it (its deadline
// has passed on Redis's clock), and every poll sees the newest value.
func TestClusterNeverAppliesANotifyItRefused(t *testing.T) {
	r := startRedis(t)
	p := startProxy(t, r.addr)
	a, _ := startServer(t, p.addr, quick)
	b, _ := startServer(t, r.addr, quick)
	within(t, "both subscribed", func() bool { return a.listen.Load() && b.listen.Load() })
	// Loads the script, so that what the stall holds is the script's call.
	notified(t, retried(t, a, "POST", "/notify?key=k", "first"))
	rc := redis.NewClient(&redis.Options{Addr: r.addr})
	defer rc.Close()

	p.stall()
	rec := do(a, "POST", "/notify?key=k", "OLD")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	notified(t, retried(t, b, "POST", "/notify?key=k", "MID"))
	vNew, _ := notified(t, retried(t, b, "POST", "/notify?key=k", "NEW"))
	p.resume()

	within(t, "Redis refused the late notify", func() bool {
		info, err := rc.Info(context.Background(), "errorstats").Result()
		return err == nil && strings.Contains(info, "errorstat_LATE:count=1")
	})
	got, err := rc.HGetAll(context.Background(), redisPrefix+"k").Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"version": fmt.Sprint(vNew), "value": "NEW"}, got)
	for _, s := range []*server{a, b} {
		rec := retried(t, s, "GET", "/wait?key=k&after=0", "")
		assert.JSONEq(t, answerJSON("k", vNew, "NEW"), rec.Body.String())
	}
}

// Issue 42, 3: Redis restarted without its data. Every server notices (the
// epoch key is gone), and a version never names two values: the key's
// next notify gets a version above every earlier one, so the polls held
// past the old versions are answered with it, and every server answers
// after=0 with it; a key Redis no longer holds is not answered with the
// value it lost, and its held poll waits for its next notify.
func TestClusterDetectsARedisThatLostItsData(t *testing.T) {
	r := startRedisKeeping(t, false)
	var ss []*server
	var logs []*logs
	for range 3 {
		s, l := startServer(t, r.addr, quick)
		ss, logs = append(ss, s), append(logs, l)
	}
	within(t, "all subscribed", func() bool { return parkedOrListening(ss) })
	var v5 uint64
	for i := range 5 {
		v5, _ = notified(t, retried(t, ss[i%3], "POST", "/notify?key=k", fmt.Sprint("old ", i)))
	}
	vg, _ := notified(t, retried(t, ss[0], "POST", "/notify?key=g", "gone"))
	var held []*call
	for _, s := range ss {
		held = append(held, parkOn(t, s, fmt.Sprintf("/wait?key=k&after=%d&timeout=1m", v5)))
	}
	onG := parkOn(t, ss[1], fmt.Sprintf("/wait?key=g&after=%d&timeout=1m", vg))

	r.stop()
	r.start(t)
	for i, l := range logs {
		within(t, fmt.Sprint("server ", i, " noticed"), func() bool { return strings.Contains(l.String(), "lost its data") })
	}
	vNew, _ := notified(t, retried(t, ss[0], "POST", "/notify?key=k", "new"))
	assert.Greater(t, vNew, v5, "a version after the loss is above every one before it")
	for i, c := range held {
		within(t, fmt.Sprint("the poll held on server ", i), c.finished)
		assert.Equal(t, http.StatusOK, c.rec.Code)
		assert.JSONEq(t, answerJSON("k", vNew, "new"), c.rec.Body.String(), "server %d", i)
	}
	for i, s := range ss {
		rec := retried(t, s, "GET", "/wait?key=k&after=0", "")
		assert.JSONEq(t, answerJSON("k", vNew, "new"), rec.Body.String(), "server %d", i)
	}

	rec := retried(t, ss[1], "GET", "/wait?key=g&after=0&timeout=0s", "")
	assert.Equal(t, http.StatusNoContent, rec.Code, "not the lost value: %s", rec.Body)
	assert.False(t, onG.finished())
	vBack, _ := notified(t, retried(t, ss[2], "POST", "/notify?key=g", "back"))
	assert.Greater(t, vBack, vg)
	within(t, "the poll held on the lost key", onG.finished)
	assert.JSONEq(t, answerJSON("g", vBack, "back"), onG.rec.Body.String())
}

func parkedOrListening(ss []*server) bool {
	for _, s := range ss {
		if !s.listen.Load() {
			return false
		}
	}
	return true
}

// Issue 42, 7: a server given an address where no Redis answers says so
// at once, naming the address, in its log, in its 503s and on /metrics.
func TestAWrongRedisAddressIsNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	s, logs := startServer(t, addr, quick)
	within(t, "the address logged", func() bool { return strings.Contains(logs.String(), "not hearing redis at "+addr) })
	for _, rec := range []*httptest.ResponseRecorder{do(s, "GET", "/wait?key=a", ""), do(s, "POST", "/notify?key=a", "x")} {
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Contains(t, rec.Body.String(), "redis at "+addr)
	}
	assert.Contains(t, do(s, "GET", "/metrics", "").Body.String(), `longpoll_store_up{store="redis at `+addr+`"} 0`)
}
