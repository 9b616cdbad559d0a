package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startServer runs the broker over HTTP on a loopback port with real
// timers and follower goroutines.
func startServer(t *testing.T, replicas int) (base string, b *Broker, stop func() error) {
	return startServerWith(t, replicas, HTTPConfig{})
}

func startServerWith(t *testing.T, replicas int, cfg HTTPConfig) (base string, b *Broker, stop func() error) {
	t.Helper()
	b, err := NewBroker(BrokerConfig{Topics: []string{"t"}, Partitions: 2, Replicas: replicas, Lag: time.Millisecond})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	srv := NewHTTPServer(ln.Addr().String(), b, cfg)
	go func() { errc <- ServeAll(ctx, b, Servers{HTTP: srv, HTTPListener: ln}) }()
	base = "http://" + ln.Addr().String()
	var once sync.Once
	var serr error
	stop = func() error {
		once.Do(func() { cancel(); serr = <-errc })
		return serr
	}
	t.Cleanup(func() { _ = stop() })
	return base, b, stop
}

var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func get(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func partitionOf(resp map[string]any, key string) map[string]any {
	return resp["partitions"].(map[string]any)[key].(map[string]any)
}

func TestHTTPLongPollFetchReturnsWhenAProduceLands(t *testing.T) {
	base, b, _ := startServer(t, 1)
	type result struct {
		code int
		body map[string]any
		took time.Duration
	}
	got := make(chan result, 1)
	go func() {
		start := time.Now()
		code, body := get(t, base+"/fetch?topic=t&partition=0&offset=0&min_bytes=1&max_wait_ms=20000")
		got <- result{code, body, time.Since(start)}
	}()
	require.Eventually(t, func() bool { return b.Stats().ConsumerFetches == 1 }, 10*time.Second, time.Millisecond,
		"the fetch is parked")

	code, body := post(t, base+"/produce", `{"partitions":[{"topic":"t","partition":0,"records":["hello"]}],"acks":-1,"timeout_ms":5000}`)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "NONE", partitionOf(body, "t-0")["error"], "acks=all answered once the follower caught up")

	r := <-got
	assert.Equal(t, http.StatusOK, r.code)
	assert.Equal(t, []any{"hello"}, partitionOf(r.body, "t-0")["records"])
	assert.Less(t, r.took, 15*time.Second, "answered by the produce, not by max_wait")
}

func TestHTTPProduceToAStoppedFollowerTimesOut(t *testing.T) {
	base, b, _ := startServer(t, 1)
	require.NoError(t, b.SetFollower(tp(1), 1, 0, true))
	code, body := post(t, base+"/produce", `{"partitions":[{"topic":"t","partition":1,"records":["x"]}],"timeout_ms":200}`)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "REQUEST_TIMED_OUT", partitionOf(body, "t-1")["error"])
}

func TestHTTPBadRequests(t *testing.T) {
	base, _, _ := startServer(t, 0)
	cases := []struct {
		name, method, path, body string
		code                     int
	}{
		{"malformed JSON", "POST", "/produce", `{"partitions":`, 400},
		{"unknown field", "POST", "/produce", `{"nope":1}`, 400},
		{"no partitions", "POST", "/produce", `{"timeout_ms":100}`, 400},
		{"bad acks", "POST", "/produce", `{"partitions":[{"topic":"t","partition":0,"records":["a"]}],"acks":2,"timeout_ms":100}`, 400},
		{"zero timeout", "POST", "/produce", `{"partitions":[{"topic":"t","partition":0,"records":["a"]}],"timeout_ms":0}`, 400},
		{"timeout that overflows a Duration", "POST", "/produce", `{"partitions":[{"topic":"t","partition":0,"records":["a"]}],"timeout_ms":18446744073709}`, 400},
		{"garbage after the body", "POST", "/produce", `{"partitions":[{"topic":"t","partition":0,"records":["a"]}],"timeout_ms":100}garbage`, 400},
		{"a second JSON value after the body", "POST", "/produce", `{"partitions":[{"topic":"t","partition":0,"records":["a"]}],"timeout_ms":100} {}`, 400},
		{"a partition without records", "POST", "/produce", `{"partitions":[{"topic":"t","partition":0,"records":["a"]},{"topic":"t","partition":1,"records":[]}],"timeout_ms":100}`, 400},
		{"unknown partition", "POST", "/produce", `{"partitions":[{"topic":"t","partition":9,"records":["a"]}],"timeout_ms":100}`, 404},
		{"oversized body", "POST", "/produce", `{"partitions":[{"topic":"t","partition":0,"records":["` + strings.Repeat("a", maxBodyBytes) + `"]}],"timeout_ms":100}`, 413},
		{"fetch without partition", "GET", "/fetch?topic=t", "", 400},
		{"fetch unknown partition", "GET", "/fetch?topic=t&partition=5", "", 404},
		{"fetch negative offset", "GET", "/fetch?topic=t&partition=0&offset=-1", "", 400},
		{"fetch bad max wait", "GET", "/fetch?topic=t&partition=0&max_wait_ms=abc", "", 400},
		{"fetch max wait that overflows a Duration", "GET", "/fetch?topic=t&partition=0&max_wait_ms=10000000000000", "", 400},
		{"wrong method", "GET", "/produce", "", 405},
		{"wrong method for fetch", "DELETE", "/fetch?topic=t&partition=0", "", 405},
		{"unknown path", "GET", "/nope", "", 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, base+c.path, bytes.NewBufferString(c.body))
			require.NoError(t, err)
			resp, err := client.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, c.code, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e map[string]string
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e), "every error is a JSON body")
			assert.NotEmpty(t, e["error"])
			if c.code == 405 {
				assert.NotEmpty(t, resp.Header.Get("Allow"))
			}
		})
	}
}

func TestHTTPDebugVarsShowsStats(t *testing.T) {
	base, _, _ := startServer(t, 0)
	code, body := get(t, base+"/debug/vars")
	assert.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "purgatory")
	assert.Contains(t, body["purgatory"], "produce")
	assert.Contains(t, body, "memstats")
}

// /metrics serves both purgatories under Kafka's names, and moves with
// them: a fetch parked and answered shows in the counts and the
// time-in-purgatory histogram.
func TestHTTPMetrics(t *testing.T) {
	base, _, _ := startServer(t, 0)
	scrape := func() string {
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	before := scrape()
	for _, want := range []string{
		`purgatory_delayed_operations{purgatory="Produce"} 0`,
		`purgatory_delayed_operations{purgatory="Fetch"} 0`,
		`purgatory_delayed_operations{purgatory="DeleteRecords"} 0`,
		`purgatory_size{purgatory="Fetch"} 0`,
		`purgatory_expires_total{purgatory="Fetch"} 0`,
		`purgatory_time_in_purgatory_seconds_count{outcome="early",purgatory="Fetch"} 0`,
		`go_goroutines`,
	} {
		assert.Contains(t, before, want)
	}
	code, _ := get(t, base+"/fetch?topic=t&partition=0&offset=0&max_wait_ms=1")
	require.Equal(t, http.StatusOK, code)
	after := scrape()
	assert.Contains(t, after, `purgatory_time_in_purgatory_seconds_count{outcome="expired",purgatory="Fetch"} 1`)
	assert.Contains(t, after, `purgatory_expires_total{purgatory="Fetch"} 1`)
}

// Shutting down with parked requests answers every one of them.
func TestHTTPShutdownAnswersParkedRequests(t *testing.T) {
	base, b, stop := startServer(t, 1)
	require.NoError(t, b.SetFollower(tp(0), 1, 0, true))
	const fetches = 5
	codes := make(chan int, fetches+1)
	errs := make(chan string, 1)
	for i := range fetches {
		go func() {
			code, _ := get(t, fmt.Sprintf("%s/fetch?topic=t&partition=%d&offset=0&max_wait_ms=30000", base, i%2))
			codes <- code
		}()
	}
	go func() {
		code, body := post(t, base+"/produce", `{"partitions":[{"topic":"t","partition":0,"records":["x"]}],"timeout_ms":30000}`)
		codes <- code
		errs <- partitionOf(body, "t-0")["error"].(string)
	}()
	require.Eventually(t, func() bool {
		st := b.Stats()
		// The purgatory holds the five fetches and at most partition 1's
		// follower's: partition 0's follower is stopped.
		return st.Produce.Pending == 1 && st.ConsumerFetches == fetches && st.Fetch.Pending >= fetches+1
	}, 10*time.Second, time.Millisecond, "everything is parked")
	require.NoError(t, stop())
	for range fetches + 1 {
		select {
		case code := <-codes:
			assert.Equal(t, http.StatusOK, code)
		case <-time.After(30 * time.Second):
			t.Fatal("a parked request was not answered")
		}
	}
	assert.Equal(t, "REQUEST_TIMED_OUT", <-errs)
}

// A produce without timeout_ms waits the configured default (main's
// -produce-timeout), and the answer names every partition of the request.
func TestHTTPProduceUsesTheDefaultTimeout(t *testing.T) {
	base, b, _ := startServerWith(t, 1, HTTPConfig{ProduceTimeout: 150 * time.Millisecond})
	require.NoError(t, b.SetFollower(tp(1), 1, 0, true))
	start := time.Now()
	code, body := post(t, base+"/produce", `{"partitions":[{"topic":"t","partition":0,"records":["a"]},{"topic":"t","partition":1,"records":["b"]}]}`)
	took := time.Since(start)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "NONE", partitionOf(body, "t-0")["error"])
	assert.Equal(t, "REQUEST_TIMED_OUT", partitionOf(body, "t-1")["error"])
	assert.GreaterOrEqual(t, took, 150*time.Millisecond, "not answered before the default timeout")
	assert.Less(t, took, 10*time.Second)
}

// An empty fetch still lists the partition, with an empty records array.
func TestHTTPEmptyFetchListsThePartition(t *testing.T) {
	base, _, _ := startServer(t, 0)
	code, body := get(t, base+"/fetch?topic=t&partition=1&offset=0&max_wait_ms=0")
	assert.Equal(t, http.StatusOK, code)
	p := partitionOf(body, "t-1")
	assert.Equal(t, "NONE", p["error"])
	assert.Equal(t, []any{}, p["records"])
	assert.Equal(t, float64(0), p["next_offset"])
}

// A client that sends half a request, or keeps an idle connection, is
// disconnected after the server's timeouts.
func TestHTTPServerTimeouts(t *testing.T) {
	base, _, _ := startServerWith(t, 0, HTTPConfig{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
		IdleTimeout: 200 * time.Millisecond})
	addr := strings.TrimPrefix(base, "http://")
	closedWithin := func(t *testing.T, conn net.Conn, d time.Duration) {
		t.Helper()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(d)))
		_, err := io.Copy(io.Discard, conn) // returns at EOF: the server closed it
		assert.NoError(t, err, "the server closes the connection before %v", d)
	}
	t.Run("half a request", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /fetch?topic=t&partition=0 HTTP/1.1\r\nHost: x\r\n")
		require.NoError(t, err)
		closedWithin(t, conn, 10*time.Second)
	})
	t.Run("an idle keep-alive connection", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /fetch?topic=t&partition=0&max_wait_ms=0 HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		closedWithin(t, conn, 10*time.Second) // after the answer, idle
	})
}
