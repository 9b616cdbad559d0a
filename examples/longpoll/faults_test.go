package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of this file break what lies between a server and its Redis,
// as a network or an operator would (issue 42), and check what clients
// see.

// Issue 42, 7: a server given an address where no Redis answers says so
// at once, naming the address, in its log, in its 503s and on /metrics.
func TestAWrongRedisAddressIsNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	s, logs := startServer(t, addr, redisOptions{})
	within(t, "the address logged", func() bool { return strings.Contains(logs.String(), "not hearing redis at "+addr) })
	for _, rec := range []*httptest.ResponseRecorder{do(s, "GET", "/wait?key=a", ""), do(s, "POST", "/notify?key=a", "x")} {
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Contains(t, rec.Body.String(), "redis at "+addr)
	}
	assert.Contains(t, do(s, "GET", "/metrics", "").Body.String(), `longpoll_store_up{store="redis at `+addr+`"} 0`)
}
