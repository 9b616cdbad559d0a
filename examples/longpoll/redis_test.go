package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
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
		ss[i], _ = startServer(t, r.addr, redisOptions{})
	}
	for _, s := range ss {
		waitUntil(t, s.listen.Load, noFailure)
	}
	return ss
}

// startServer starts a server on the Redis at addr, with o, and returns
// it with what it logs. It is closed when the test ends.
func startServer(t *testing.T, addr string, o redisOptions) (*server, *logs) {
	t.Helper()
	rs := newRedisStore(addr, o)
	l := new(logs)
	s, err := newServer(config{store: rs, log: log.New(l, "", log.Lmicroseconds)})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, s.close(context.Background()))
		assert.NoError(t, rs.client.Close())
	})
	return s, l
}

// logs is a log's output, for tests to read while it is written.
type logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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

	v7, woken := notified(t, do(ss[0], "POST", "/notify?key=k7", "seven"))
	assert.Equal(t, onServer0, woken, "woken counts the notified server's polls")
	// A second key's change, on another server: the channel delivers in
	// order, so once its polls are answered everywhere, anything k7's
	// message was going to do has been done.
	v8, _ := notified(t, do(ss[1], "POST", "/notify?key=k8", "eight"))
	for i, c := range calls {
		if k := i % keys; k == 7 || k == 8 {
			<-c.done
			assert.Equal(t, http.StatusOK, c.rec.Code, "poll %d", i)
			want := map[int]string{7: answerJSON("k7", v7, "seven"), 8: answerJSON("k8", v8, "eight")}[k]
			assert.JSONEq(t, want, c.rec.Body.String(), "poll %d", i)
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

	v1, woken := notified(t, do(ss[2], "POST", "/notify?key=a", "hello"))
	assert.Zero(t, woken)
	after := do(ss[1], "GET", "/wait?key=a&after=0&timeout=1m", "")
	<-before.done
	for _, rec := range []*httptest.ResponseRecorder{before.rec, after} {
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.JSONEq(t, answerJSON("a", v1, "hello"), rec.Body.String())
	}

	next := start(ss[2], httptest.NewRequest("GET", fmt.Sprintf("/wait?key=a&after=%d&timeout=1m", v1), nil))
	waitUntil(t, func() bool { return ss[2].polls.NumDelayed() == 1 }, noFailure)
	v2, _ := notified(t, do(ss[1], "POST", "/notify?key=a", "again"))
	assert.Equal(t, v1+1, v2, "each notify adds one")
	<-next.done
	assert.JSONEq(t, answerJSON("a", v2, "again"), next.rec.Body.String())
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
	first := make([]uint64, keys)
	for k := range keys {
		first[k], _ = notified(t, do(ss[k%3], "POST", fmt.Sprintf("/notify?key=k%d", k), "old"))
	}
	parkedAt := time.Now()
	calls := make([]*call, polls)
	for i := range polls {
		target := fmt.Sprintf("/wait?key=k%d&after=%d&timeout=%v", i%keys, first[i%keys], timeout)
		calls[i] = start(ss[(i/keys)%3], httptest.NewRequest("GET", target, nil))
	}
	waitUntil(t, func() bool { return parked(ss) == polls }, noFailure)

	r.stop()
	for _, s := range ss {
		waitUntil(t, func() bool { return !s.listen.Load() }, noFailure)
		for _, rec := range []*httptest.ResponseRecorder{
			do(s, "GET", fmt.Sprintf("/wait?key=k0&after=%d&timeout=1m", first[0]), ""),
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
			assert.JSONEq(t, answerJSON(fmt.Sprint("k", k), first[k]+1, fmt.Sprint("new ", k)), c.rec.Body.String(), "poll %d", i)
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
	v, _ := notified(t, do(ss[1], "POST", "/notify?key=a", "missed"))
	time.Sleep(100 * time.Millisecond)
	assert.False(t, a.finished(), "the change was not heard")

	ss[0].stop = ss[0].store.listen(ss[0])
	<-a.done
	assert.JSONEq(t, answerJSON("a", v, "missed"), a.rec.Body.String())
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
	rec := do(ss[1], "GET", "/wait?key=a&timeout=0s", "")
	assert.Equal(t, http.StatusNoContent, rec.Code, "the refused notify stored nothing: %s", rec.Body)
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
