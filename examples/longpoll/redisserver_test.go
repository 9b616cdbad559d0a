package main

import (
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// redisServer is a redis-server that a test started on a free loopback
// port, with its data in the test's temporary directory. Unless it is
// ephemeral, its append-only file keeps every write across a stop and
// start, as a Redis that servers share should; faults_test.go's ephemeral
// one comes back empty, which the servers must notice.
type redisServer struct {
	bin, dir, addr string
	ephemeral      bool // keeps nothing across a stop and start, as a cache would
	cmd            *exec.Cmd
}

// redisBinary finds redis-server on PATH or in /usr/bin. Without it the
// test is skipped, except in CI (CI set), where .ci/run installs it and
// its absence is a failure.
func redisBinary(t testing.TB) string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server"
	}
	if os.Getenv("CI") != "" {
		t.Fatal("redis-server not found on PATH or in /usr/bin: .ci/run installs Debian's redis-server")
	}
	t.Skip("redis-server not found on PATH or in /usr/bin (apt-get install redis-server)")
	return ""
}

// startRedis starts a redis-server, stopped when the test ends.
func startRedis(t testing.TB) *redisServer { return startRedisKeeping(t, true) }

// startRedisKeeping starts a redis-server that keeps its data across a
// restart, or (keep false) one that comes back empty.
func startRedisKeeping(t testing.TB, keep bool) *redisServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	r := &redisServer{bin: redisBinary(t), dir: t.TempDir(), addr: addr, ephemeral: !keep}
	r.start(t)
	t.Cleanup(r.stop)
	return r
}

// start runs redis-server and returns once it accepts connections.
func (r *redisServer) start(t testing.TB) {
	_, port, _ := net.SplitHostPort(r.addr)
	aof := "yes"
	if r.ephemeral {
		aof = "no"
	}
	r.cmd = exec.Command(r.bin, "--bind", "127.0.0.1", "--port", port, "--dir", r.dir,
		"--save", "", "--appendonly", aof, "--appendfsync", "no", "--daemonize", "no")
	require.NoError(t, r.cmd.Start())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", r.addr)
		if err == nil {
			_, err = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			if err == nil {
				_, err = c.Read(buf)
			}
			c.Close()
			if err == nil && string(buf) == "+PONG\r\n" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer within 10s: %v", r.addr, err)
		}
	}
}

// stop ends redis-server as its service manager would (SIGTERM: it writes
// its append-only file and closes every connection) and waits for it.
func (r *redisServer) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	_ = r.cmd.Wait()
	r.cmd = nil
}
