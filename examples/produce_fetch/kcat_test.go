package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
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
	kb := startKafka(t, BrokerConfig{Replicas: 2, Lag: time.Millisecond}, kafkawire.Config{})
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

// kcat (librdkafka 2.0, Debian's) compresses with gzip, snappy and lz4
// only if the broker advertises Produce v0 (and, for lz4, FindCoordinator
// v0): it sent these uncompressed when Produce started at v3. Each batch is
// stored as sent, so its attributes show the codec it arrived with, and a
// consumer reads the records back.
func TestKcatCompresses(t *testing.T) {
	kcat := kcatPath(t)
	kb := startKafka(t, BrokerConfig{Topics: []string{"t"}, Partitions: 3}, kafkawire.Config{})
	ctx := testCtx(t, 60*time.Second)
	codecs := []struct {
		name string
		attr int16
	}{{"gzip", 1}, {"snappy", 2}, {"lz4", 3}}
	value := strings.Repeat("compressible ", 20)
	for i, c := range codecs {
		p := strconv.Itoa(i)
		cmd := exec.CommandContext(ctx, kcat, "-b", kb.addr, "-P", "-t", "t", "-p", p, "-z", c.name, "-X", "debug=msg")
		cmd.Stdin = strings.NewReader(c.name + " " + value + "\n" + c.name + " again " + value + "\n")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.NotContains(t, string(out), "not compressing", "librdkafka compressed with %s", c.name)
		part := kb.b.partitions[tp(int32(i))]
		part.mu.Lock()
		require.Len(t, part.log.Batches(), 1, "one batch of two records")
		var rb kmsg.RecordBatch
		require.NoError(t, rb.ReadFrom(part.log.Batches()[0]))
		part.mu.Unlock()
		assert.Equal(t, c.attr, rb.Attributes&0x07, "the batch arrived compressed with %s", c.name)
		assert.Equal(t, int32(2), rb.NumRecords)

		got, err := exec.CommandContext(ctx, kcat, "-b", kb.addr, "-C", "-t", "t", "-p", p, "-o", "beginning", "-e", "-q", "-f", "%s\n").Output()
		require.NoError(t, err)
		assert.Equal(t, c.name+" "+value+"\n"+c.name+" again "+value+"\n", string(got))
	}
}

// syncBuffer is a bytes.Buffer safe to write from a command and read from
// the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Two kcat -G members of one group split its 8 partitions between them,
// consume every record once between them, and leave the group when
// interrupted.
func TestKcatGroupOfTwo(t *testing.T) {
	kcat := kcatPath(t)
	kb := groupBroker(t, nil)
	ctx := testCtx(t, 90*time.Second)
	producer := kb.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))

	type member struct {
		cmd  *exec.Cmd
		out  syncBuffer
		errs syncBuffer
	}
	var ms []*member
	for _, name := range []string{"a", "b"} {
		m := &member{}
		m.cmd = exec.CommandContext(ctx, kcat, "-b", kb.addr, "-G", "kg", "t", "-u", "-q", "-o", "beginning",
			"-f", "%p/%o\n", "-X", "client.id="+name, "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=300")
		m.cmd.Stdout, m.cmd.Stderr = &m.out, &m.errs
		require.NoError(t, m.cmd.Start())
		t.Cleanup(func() { _ = m.cmd.Process.Kill(); _ = m.cmd.Wait() })
		ms = append(ms, m)
	}
	// Both in the group, each with some of the partitions.
	owners := func() map[string]int {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{"kg"}
		resp, err := req.RequestWith(ctx, producer)
		if err != nil || len(resp.Groups) != 1 || resp.Groups[0].State != "Stable" {
			return nil
		}
		n := map[string]int{}
		for _, gm := range resp.Groups[0].Members {
			var a kmsg.ConsumerMemberAssignment
			if a.ReadFrom(gm.MemberAssignment) == nil {
				for _, tp := range a.Topics {
					n[gm.ClientID] += len(tp.Partitions)
				}
			}
		}
		return n
	}
	require.Eventually(t, func() bool {
		n := owners()
		return n["a"] > 0 && n["b"] > 0 && n["a"]+n["b"] == 8
	}, 60*time.Second, 20*time.Millisecond, "both members hold partitions: %v", owners())

	produced := produceEach(t, ctx, producer, 5, "k")
	lines := func() []string {
		var all []string
		for _, m := range ms {
			all = append(all, strings.Fields(m.out.String())...)
		}
		return all
	}
	require.Eventually(t, func() bool { return len(lines()) >= produced }, 60*time.Second, 20*time.Millisecond,
		"the two members consume all %d records", produced)
	seen := map[string]bool{}
	for _, l := range lines() {
		assert.False(t, seen[l], "%s consumed twice", l)
		seen[l] = true
	}
	assert.Len(t, seen, produced)
	for i, m := range ms {
		assert.NotEmpty(t, m.out.String(), "member %d consumed its share", i)
	}

	// Interrupted, kcat leaves the group (LeaveGroup), which empties.
	for _, m := range ms {
		require.NoError(t, m.cmd.Process.Signal(os.Interrupt))
	}
	for _, m := range ms {
		_ = m.cmd.Wait()
	}
	state, members := describeMembers(t, ctx, producer, "kg")
	assert.Empty(t, members, "both left: %s %s", ms[0].errs.String(), ms[1].errs.String())
	assert.Contains(t, []string{"Empty", "PreparingRebalance"}, state)
}
