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
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of this file run servers that share a real redis-server,
// started on a free loopback port (redisserver_test.go), as main does
// with -redis. They drive the servers' handlers directly: the HTTP layer
// is http_test.go's.

// startCluster starts n servers on r's Redis, each with a client of its
// own, and returns once each has subscribed. They are closed when the test
// ends, before r stops.
func startCluster(t *testing.T, r *redisServer, n int) []*server {
	t.Helper()
	ss := make([]*server, n)
	for i := range ss {
		rs := newRedisStore(r.addr)
		s, err := newServer(config{store: rs})
		require.NoError(t, err)
		t.Cleanup(func() {
			assert.NoError(t, s.close(context.Background()))
			assert.NoError(t, rs.client.Close())
		})
		ss[i] = s
	}
	for _, s := range ss {
		waitUntil(t, s.listen.Load, noFailure)
	}
	return ss
}

// notified returns the version and woken of a notify's 200.
func notified(t *testing.T, rec *httptest.ResponseRecorder) (version uint64, woken int) {
	t.Helper()
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var got struct {
		Version uint64
		Woken   int
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	return got.Version, got.Woken
}

// answerJSON is the answer to a poll, for JSONEq.
func answerJSON(key string, version uint64, value string) string {
	return fmt.Sprintf(`{"key":%q,"version":%d,"value":%q}`, key, version, value)
}

func parked(ss []*server) int {
	n := 0
	for _, s := range ss {
		n += s.polls.NumDelayed()
	}
	return n
}

// One notify, made on one server, answers every poll on its key on all
// three servers and no other. 3,000 polls on 30 keys, each key's spread
// over the three.
func TestClusterNotifyAnswersItsKeyOnEveryServer(t *testing.T) {
	const polls, keys = 3000, 30
	ss := startCluster(t, startRedis(t), 3)
	calls := make([]*call, polls)
	onServer0 := 0
	for i := range polls {
		s := (i / keys) % len(ss)
		if i%keys == 7 && s == 0 {
			onServer0++
		}
		calls[i] = start(ss[s], httptest.NewRequest("GET", fmt.Sprintf("/wait?key=k%d&timeout=5m", i%keys), nil))
	}
	waitUntil(t, func() bool { return parked(ss) == polls }, noFailure)

	rec := do(ss[0], "POST", "/notify?key=k7", "seven")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, fmt.Sprintf(`{"version":1,"woken":%d}`, onServer0), rec.Body.String(),
		"woken counts the notified server's polls")
	// A second key's change, on another server: the channel delivers in
	// order, so once its polls are answered everywhere, anything k7's
	// message was going to do has been done.
	do(ss[1], "POST", "/notify?key=k8", "eight")
	for i, c := range calls {
		if k := i % keys; k == 7 || k == 8 {
			<-c.done
			assert.Equal(t, http.StatusOK, c.rec.Code, "poll %d", i)
			want := map[int]string{7: "seven", 8: "eight"}[k]
			assert.JSONEq(t, fmt.Sprintf(`{"key":"k%d","version":1,"value":%q}`, k, want), c.rec.Body.String(), "poll %d", i)
		}
	}
	for i, c := range calls {
		if k := i % keys; k != 7 && k != 8 {
			assert.False(t, c.finished(), "poll %d on k%d", i, k)
		}
	}
	assert.Equal(t, polls-2*polls/keys, parked(ss))
}

// A poll parked before a notify on one server, and one made after it on
// another, see the same version and value; so does a poll made on the
// third server, past that version, at the next notify.
func TestClusterPollsBeforeAndAfterANotifySeeOneVersion(t *testing.T) {
	ss := startCluster(t, startRedis(t), 3)
	before := start(ss[0], httptest.NewRequest("GET", "/wait?key=a&timeout=1m", nil))
	waitUntil(t, func() bool { return ss[0].polls.NumDelayed() == 1 }, noFailure)

	assert.JSONEq(t, `{"version":1,"woken":0}`, do(ss[2], "POST", "/notify?key=a", "hello").Body.String())
	after := do(ss[1], "GET", "/wait?key=a&after=0&timeout=1m", "")
	<-before.done
	for _, rec := range []*httptest.ResponseRecorder{before.rec, after} {
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.JSONEq(t, `{"key":"a","version":1,"value":"hello"}`, rec.Body.String())
	}

	next := start(ss[2], httptest.NewRequest("GET", "/wait?key=a&after=1&timeout=1m", nil))
	waitUntil(t, func() bool { return ss[2].polls.NumDelayed() == 1 }, noFailure)
	assert.JSONEq(t, `{"version":2,"woken":0}`, do(ss[1], "POST", "/notify?key=a", "again").Body.String())
	<-next.done
	assert.JSONEq(t, `{"key":"a","version":2,"value":"again"}`, next.rec.Body.String())
}

// Redis stopped for a second and started again on its port, with 1,000
// polls parked over three servers on 30 keys and notifies arriving: while
// it is down, new polls and notifies are refused with 503 and Retry-After;
// every poll whose key changed is answered with its newest value once it
// is back, long before its timeout; the others at their timeouts, 204.
// Notifies are retried as a client honouring Retry-After would, so some
// land before a server has subscribed again: that server hears of them
// only by reading its keys when it does.
func TestClusterRecoversFromARedisRestart(t *testing.T) {
	const polls, keys = 1000, 30
	const timeout = 10 * time.Second // long enough to tell "after the restart" from "at the timeout"
	r := startRedis(t)
	ss := startCluster(t, r, 3)
	for k := range keys {
		require.Equal(t, http.StatusOK, do(ss[k%3], "POST", fmt.Sprintf("/notify?key=k%d", k), "old").Code)
	}
	parkedAt := time.Now()
	calls := make([]*call, polls)
	for i := range polls {
		target := fmt.Sprintf("/wait?key=k%d&after=1&timeout=%v", i%keys, timeout)
		calls[i] = start(ss[(i/keys)%3], httptest.NewRequest("GET", target, nil))
	}
	waitUntil(t, func() bool { return parked(ss) == polls }, noFailure)

	r.stop()
	for _, s := range ss {
		waitUntil(t, func() bool { return !s.listen.Load() }, noFailure)
		for _, rec := range []*httptest.ResponseRecorder{
			do(s, "GET", "/wait?key=k0&after=1&timeout=1m", ""),
			do(s, "POST", "/notify?key=k0", "refused"),
		} {
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		}
	}
	changed := func(k int) bool { return k < keys/2 }
	var notifies sync.WaitGroup
	for k := range keys / 2 {
		notifies.Go(func() {
			for do(ss[(k+1)%3], "POST", fmt.Sprintf("/notify?key=k%d", k), fmt.Sprint("new ", k)).Code != http.StatusOK {
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	restarted := time.Now()
	r.start(t)
	notifies.Wait()

	var latest time.Duration
	for i, c := range calls {
		<-c.done
		k := i % keys
		if changed(k) {
			assert.Equal(t, http.StatusOK, c.rec.Code, "poll %d on k%d", i, k)
			assert.JSONEq(t, fmt.Sprintf(`{"key":"k%d","version":2,"value":"new %d"}`, k, k), c.rec.Body.String(), "poll %d", i)
			assert.True(t, c.at.Before(parkedAt.Add(timeout)), "poll %d answered before its timeout", i)
			latest = max(latest, c.at.Sub(restarted))
		} else {
			assert.Equal(t, http.StatusNoContent, c.rec.Code, "poll %d on k%d", i, k)
			assert.False(t, c.at.Before(parkedAt.Add(timeout)), "poll %d expired at its timeout", i)
		}
	}
	t.Logf("the last changed key's poll was answered %v after redis-server was started again", latest)
	for _, s := range ss {
		assert.True(t, s.listen.Load())
		assert.Empty(t, s.keys.held())
	}
}

// A server that missed changes while it was not subscribed reads every
// key its polls hold when it subscribes again, and answers those that
// moved on. Unlike a restart, this makes sure the change is missed.
func TestClusterReadsItsKeysWhenItSubscribesAgain(t *testing.T) {
	ss := startCluster(t, startRedis(t), 2)
	a := start(ss[0], httptest.NewRequest("GET", "/wait?key=a&timeout=1m", nil))
	b := start(ss[0], httptest.NewRequest("GET", "/wait?key=b&timeout=1m", nil))
	waitUntil(t, func() bool { return ss[0].polls.NumDelayed() == 2 }, noFailure)

	ss[0].stop() // as if its subscription were lost: it hears nothing now
	ss[0].lost(fmt.Errorf("test: unsubscribed"))
	assert.Equal(t, http.StatusServiceUnavailable, do(ss[0], "GET", "/wait?key=c", "").Code)
	assert.JSONEq(t, `{"version":1,"woken":0}`, do(ss[1], "POST", "/notify?key=a", "missed").Body.String())
	time.Sleep(100 * time.Millisecond)
	assert.False(t, a.finished(), "the change was not heard")

	ss[0].stop = ss[0].store.listen(ss[0])
	<-a.done
	assert.JSONEq(t, `{"key":"a","version":1,"value":"missed"}`, a.rec.Body.String())
	assert.False(t, b.finished())
	waitUntil(t, ss[0].listen.Load, noFailure)
}

// Bad input is refused with 400 in a cluster as in one process, and a
// refused notify stores nothing in Redis.
func TestClusterRefusesBadInput(t *testing.T) {
	ss := startCluster(t, startRedis(t), 2)
	for _, target := range []string{"/wait", "/wait?key=a&after=one", "/wait?key=a&timeout=6m"} {
		assert.Equal(t, http.StatusBadRequest, do(ss[0], "GET", target, "").Code, target)
	}
	assert.Equal(t, http.StatusBadRequest, do(ss[0], "POST", "/notify", "x").Code)
	assert.Equal(t, http.StatusRequestEntityTooLarge, do(ss[0], "POST", "/notify?key=a", strings.Repeat("x", maxValueBytes+1)).Code)
	assert.JSONEq(t, `{"version":1,"woken":0}`, do(ss[1], "POST", "/notify?key=a", "x").Body.String(),
		"the refused notify stored nothing")
}

// A change's message carries the key's length, so keys and values with
// spaces, or empty values, come through whole.
func TestParseChange(t *testing.T) {
	for _, c := range []struct{ key, value string }{{"a", "b"}, {"a b", "c d "}, {"k", ""}, {"é 1", "2 3"}} {
		origin, key, e, err := parseChange(fmt.Sprintf("me %d %d %s%s", 7, len(c.key), c.key, c.value))
		require.NoError(t, err)
		assert.Equal(t, "me", origin)
		assert.Equal(t, c.key, key)
		assert.Equal(t, entry{Version: 7, Value: c.value}, *e)
	}
	for _, bad := range []string{"", "me", "me 7", "me 7 3 ab", "me x 1 a", "me 7 x a", "me 7 -1 a"} {
		_, _, _, err := parseChange(bad)
		assert.Error(t, err, bad)
	}
}
