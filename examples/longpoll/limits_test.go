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
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of this file hold the server to its limits on what a client
// may send and what it keeps (issue 42: 4, 5, 6 and 8).

// Issue 42, 4: a body that trickles in is cut at the body deadline, over
// HTTP/1.1 and HTTP/2: a notify is answered 408, and a request whose
// handler does not read its body (a 405) does not leave the server reading
// it; either way the connection is closed.
func TestSlowBodiesAreCutAtTheirDeadline(t *testing.T) {
	l := startLiveWith(t, config{bodyTimeout: 200 * time.Millisecond})
	host := strings.TrimPrefix(l.url, "http://")
	for req, want := range map[string]string{
		"POST /notify?key=a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx": "HTTP/1.1 408 ",
		"POST /wait?key=a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx":   "HTTP/1.1 405 ",
	} {
		c, err := net.Dial("tcp", host)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(generous)))
		_, err = io.WriteString(c, req)
		require.NoError(t, err)
		got, err := io.ReadAll(c) // to the server's close
		require.NoError(t, err, "the server closes the connection")
		assert.True(t, strings.HasPrefix(string(got), want), "%q", got)
		c.Close()
	}

	// One HTTP/2 stream whose body never comes.
	body, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", l.url+"/notify?key=a", body)
	require.NoError(t, err)
	resp, err := newClient(t, true).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)

	// A body that comes in time is read.
	v, _ := notify(t, newClient(t, false), l.url, "a", "in time")
	assert.Equal(t, 1, v)
}

// Issue 42, 8: a value is at most a mebibyte; one byte more is 413.
func TestValuesOverAMebibyteAre413(t *testing.T) {
	s := newTestServer(t, 0)
	assert.Equal(t, http.StatusOK, do(s, "POST", "/notify?key=a", strings.Repeat("x", maxValueBytes)).Code)
	assert.Equal(t, http.StatusRequestEntityTooLarge, do(s, "POST", "/notify?key=a", strings.Repeat("x", maxValueBytes+1)).Code)
	assert.JSONEq(t, answerJSON("a", 1, strings.Repeat("x", maxValueBytes)), do(s, "GET", "/wait?key=a", "").Body.String())
}

// Issue 42, 5: keys have a maximum length, and what the server keeps of a
// key is a copy: the purgatory keeps the keys of recently emptied watch
// lists a while, and a slice of the request would keep the whole request
// line with it.
func TestKeysAreBoundedAndCopied(t *testing.T) {
	s := newTestServer(t, 0)
	longest := strings.Repeat("k", maxKeyBytes)
	assert.Equal(t, http.StatusOK, do(s, "POST", "/notify?key="+longest, "x").Code)
	assert.Equal(t, http.StatusOK, do(s, "GET", "/wait?key="+longest, "").Code)
	for _, target := range []string{"/notify?key=" + longest + "k", "/wait?key=" + longest + "k"} {
		method := map[bool]string{true: "POST", false: "GET"}[strings.HasPrefix(target, "/notify")]
		assert.Equal(t, http.StatusBadRequest, do(s, method, target, "x").Code, target[:10])
	}

	req := httptest.NewRequest("GET", "/wait?key=copied&timeout=1m&padding="+strings.Repeat("p", 4096), nil)
	c := start(s, req)
	within(t, "parked", func() bool { return s.polls.NumDelayed() == 1 })
	s.keys.mu.Lock()
	name := s.keys.m["copied"].name
	s.keys.mu.Unlock()
	raw := req.URL.RawQuery
	from := uintptr(unsafe.Pointer(unsafe.StringData(raw)))
	at := uintptr(unsafe.Pointer(unsafe.StringData(name)))
	assert.False(t, at >= from && at < from+uintptr(len(raw)), "the key kept is a slice of the request's URL")
	do(s, "POST", "/notify?key=copied", "x")
	<-c.done
}

// binaryAnswer is a poll's answer with its base64 fields decoded.
type binaryAnswer struct {
	Key         *string `json:"key"`
	KeyBase64   []byte  `json:"key_base64"`
	Version     uint64  `json:"version"`
	Value       *string `json:"value"`
	ValueBase64 []byte  `json:"value_base64"`
}

// Issue 42, 6: keys and values that are not UTF-8 come back byte for
// byte, in base64, alone and through Redis (both its message and a read);
// text stays text.
func TestBinaryKeysAndValuesRoundTrip(t *testing.T) {
	const key, value = "\xff\xfe", "\xff\xfe\x00binary\x80"
	check := func(t *testing.T, rec *httptest.ResponseRecorder, version uint64) {
		t.Helper()
		require.Equal(t, http.StatusOK, rec.Code)
		var a binaryAnswer
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a))
		assert.Equal(t, binaryAnswer{KeyBase64: []byte(key), Version: version, ValueBase64: []byte(value)}, a, rec.Body.String())
	}
	t.Run("in memory", func(t *testing.T) {
		s := newTestServer(t, 0)
		v, _ := notified(t, do(s, "POST", "/notify?key=%FF%FE", value))
		check(t, do(s, "GET", "/wait?key=%FF%FE", ""), v)
		notified(t, do(s, "POST", "/notify?key=text", "é ok"))
		assert.JSONEq(t, answerJSON("text", 1, "é ok"), do(s, "GET", "/wait?key=text", "").Body.String())
	})
	t.Run("through Redis", func(t *testing.T) {
		ss := startCluster(t, startRedis(t), 2)
		held := parkOn(t, ss[1], "/wait?key=%FF%FE&timeout=1m")
		v, _ := notified(t, do(ss[0], "POST", "/notify?key=%FF%FE", value))
		within(t, "the poll answered", held.finished)
		check(t, held.rec, v)
		check(t, do(ss[0], "GET", "/wait?key=%FF%FE", ""), v)
	})
}

// Issue 42, 8: in memory, a key with no notify for the TTL is forgotten,
// and the map is made again smaller once it has shrunk by half; a key put
// again starts above every version it had.
func TestMemoryStoreForgetsIdleKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := &memStore{ttl: time.Minute}
		first, err := m.put(ctx, "k0", "x")
		require.NoError(t, err)
		for i := 1; i < 20_000; i++ {
			_, _ = m.put(ctx, fmt.Sprint("k", i), "x")
		}
		require.Len(t, m.keys, 20_000)

		time.Sleep(45 * time.Second)
		kept, _ := m.put(ctx, "kept", "y")
		time.Sleep(45 * time.Second)
		es, _ := m.get(ctx, "k0", "kept")
		assert.Equal(t, []*entry{noEntry, kept}, es, "k0 idle for 90s is gone; kept, put 45s ago, is not")
		_, _ = m.put(ctx, "other", "z")
		assert.Len(t, m.keys, 2)
		assert.Equal(t, 2, m.peak, "the map was made again at its new size")
		again, _ := m.put(ctx, "k0", "x")
		assert.Greater(t, again.Version, first.Version)
	})
}

// Issue 42, 8: in Redis, each notify sets its key's TTL; a key that
// expired starts again above every version it had.
func TestRedisKeysExpire(t *testing.T) {
	r := startRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: r.addr})
	defer rc.Close()
	ctx := context.Background()

	day, _ := startServer(t, r.addr, redisOptions{ttl: 24 * time.Hour})
	within(t, "subscribed", day.listen.Load)
	notified(t, retried(t, day, "POST", "/notify?key=kept", "x"))
	ttl, err := rc.PTTL(ctx, redisPrefix+"kept").Result()
	require.NoError(t, err)
	assert.True(t, ttl > 23*time.Hour && ttl <= 24*time.Hour, "TTL %v", ttl)

	brief, _ := startServer(t, r.addr, redisOptions{ttl: 100 * time.Millisecond})
	within(t, "subscribed", brief.listen.Load)
	v1, _ := notified(t, retried(t, brief, "POST", "/notify?key=brief", "x"))
	within(t, "the key expired", func() bool { n, err := rc.Exists(ctx, redisPrefix+"brief").Result(); return err == nil && n == 0 })
	assert.Equal(t, http.StatusNoContent, do(day, "GET", "/wait?key=brief&timeout=0s", "").Code)
	v2, _ := notified(t, retried(t, brief, "POST", "/notify?key=brief", "y"))
	assert.Greater(t, v2, v1)
}
