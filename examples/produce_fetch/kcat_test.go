package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kcat is librdkafka's command-line client: a Kafka client this project
// did not write, with its default settings. The test needs it on PATH
// (Debian's kcat package; .ci/run installs it) and is skipped without it.
func kcatPath(t *testing.T) string {
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not on PATH: install it (apt-get install kcat, as .ci/run does) to run the kcat round trip")
	}
	return path
}

// kcat produces with acks=all and consumes it back, then a kcat consumer
// long-polls at the log end and gets the next record once it is produced.
func TestKcatRoundTrip(t *testing.T) {
	kcat := kcatPath(t)
	kb := startKafka(t, BrokerConfig{Replicas: 2, Lag: time.Millisecond}, KafkaConfig{})
	ctx := testCtx(t, 90*time.Second)
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kcat, append([]string{"-b", kb.addr, "-q"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "kcat %s: %s", strings.Join(args, " "), stderr.String())
		return string(out)
	}

	run("one\ntwo\nthree\n", "-P", "-t", "t", "-p", "0", "-X", "acks=all")
	st := kb.b.partitions[tp(0)].state()
	assert.Equal(t, int64(3), st.leo)
	assert.Equal(t, int64(3), st.hw, "kcat returned after its acks=all produce, so the records are committed")
	assert.GreaterOrEqual(t, kb.b.Stats().Produce.CompletedEarly, uint64(1), "the produce was parked and completed")

	out := run("", "-C", "-t", "t", "-p", "0", "-o", "beginning", "-c", "3", "-f", "%o:%s\n")
	assert.Equal(t, "0:one\n1:two\n2:three\n", out)

	// The long poll: a consumer at the log end, with a 5 s max wait. The
	// consumer above left a fetch parked when it exited; it expires at
	// librdkafka's default max wait (500 ms), and then the only parked fetch
	// is the new consumer's.
	require.Eventually(t, func() bool { return kb.b.Stats().ConsumerFetches == 0 }, 30*time.Second, 5*time.Millisecond)
	polled := make(chan string, 1)
	go func() {
		cmd := exec.CommandContext(ctx, kcat, "-b", kb.addr, "-q", "-C", "-t", "t", "-p", "0", "-o", "end", "-c", "1",
			"-f", "%o:%s\n", "-X", "fetch.wait.max.ms=5000")
		out, err := cmd.Output()
		if err != nil {
			out = []byte("error: " + err.Error())
		}
		polled <- string(out)
	}()
	require.Eventually(t, func() bool { return kb.b.Stats().ConsumerFetches >= 1 }, 30*time.Second, 5*time.Millisecond,
		"kcat's fetch is parked")
	sent := time.Now()
	run("four\n", "-P", "-t", "t", "-p", "0", "-X", "acks=all")
	select {
	case got := <-polled:
		assert.Equal(t, "3:four\n", got)
		t.Logf("kcat produce to kcat consumer: %v (two process starts included)", time.Since(sent))
	case <-ctx.Done():
		t.Fatal("the long-polling kcat consumer got nothing")
	}
}
