package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
)

// rawClient speaks to the Kafka front end over a bare TCP connection, so
// that a test can send what no client library would.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &rawClient{t: t, conn: conn}
}

// send writes a well-formed request at the given version.
func (c *rawClient) send(req kmsg.Request, version int16) int32 {
	c.t.Helper()
	req.SetVersion(version)
	c.corr++
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, c.corr)
	c.write(frame)
	return c.corr
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	_, err := c.conn.Write(b)
	require.NoError(c.t, err)
}

// frame writes a size prefix and body as given.
func (c *rawClient) frame(size int32, body []byte) {
	c.t.Helper()
	c.write(binary.BigEndian.AppendUint32(nil, uint32(size)))
	c.write(body)
}

// receive reads one response into resp (whose version must be set),
// checking its correlation ID; flexible says whether the header has tags.
func (c *rawClient) receive(resp kmsg.Response, corr int32, flexible bool) {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	var size [4]byte
	_, err := io.ReadFull(c.conn, size[:])
	require.NoError(c.t, err)
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err = io.ReadFull(c.conn, body)
	require.NoError(c.t, err)
	require.Equal(c.t, corr, int32(binary.BigEndian.Uint32(body[:4])))
	body = body[4:]
	if flexible {
		require.Equal(c.t, byte(0), body[0], "no header tags")
		body = body[1:]
	}
	require.NoError(c.t, resp.ReadFrom(body))
}

// closed asserts that the server closes the connection (within a bound).
// A server that closes with our bytes unread resets the connection, which
// counts too.
func (c *rawClient) closed() {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	n, err := io.Copy(io.Discard, c.conn)
	if !errors.Is(err, syscall.ECONNRESET) {
		assert.NoError(c.t, err, "closed by the server, not by our read deadline")
	}
	assert.Zero(c.t, n, "no answer before closing")
}

// works asserts that a fresh connection still gets an ApiVersions answer.
func works(t *testing.T, addr string) {
	t.Helper()
	c := dialRaw(t, addr)
	corr := c.send(kmsg.NewPtrApiVersionsRequest(), 3)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(3)
	c.receive(resp, corr, false)
	assert.Equal(t, int16(0), resp.ErrorCode)
}

// Bad frames close their own connection and nothing else: the server keeps
// serving the connection opened before them and new ones.
func TestKafkaBadFramesCloseOnlyTheirConnection(t *testing.T) {
	kb := startKafka(t, BrokerConfig{}, kafkawire.Config{MaxRequestBytes: 1 << 20})
	bystander := dialRaw(t, kb.addr)

	metadataV9 := func() []byte {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(9)
		return kmsg.NewRequestFormatter().AppendRequest(nil, req, 1)
	}()
	cases := []struct {
		name string
		send func(c *rawClient)
	}{
		{"garbage", func(c *rawClient) { c.frame(16, []byte("this is no kafka")) }},
		{"a frame over the size limit", func(c *rawClient) { c.frame(2<<20, []byte("x")) }},
		{"a negative frame size", func(c *rawClient) { c.frame(-5, nil) }},
		{"a frame too short for a header", func(c *rawClient) { c.frame(3, []byte{0, 3, 0}) }},
		{"an unknown API key", func(c *rawClient) { c.frame(10, []byte{0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0, 0}) }},
		{"an API this broker does not serve", func(c *rawClient) { c.send(kmsg.NewPtrCreateTopicsRequest(), 4) }},
		{"a Produce version above the supported range", func(c *rawClient) { c.send(kmsg.NewPtrProduceRequest(), 12) }},
		{"an OffsetCommit version of KIP-848's era", func(c *rawClient) { c.send(kmsg.NewPtrOffsetCommitRequest(), 9) }},
		{"a Fetch version above the supported range", func(c *rawClient) { c.send(kmsg.NewPtrFetchRequest(), 13) }},
		{"a truncated body", func(c *rawClient) {
			f := metadataV9[:len(metadataV9)-1]
			binary.BigEndian.PutUint32(f, uint32(len(f)-4))
			c.write(f)
		}},
		{"a good header and a garbage body", func(c *rawClient) {
			// Produce v9, correlation 1, no client ID, no tags, then 0xff:
			// a transactional ID longer than the frame.
			body := []byte{0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0}
			c.frame(int32(len(body)+8), append(body, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, kb.addr)
			tc.send(c)
			c.closed()
			works(t, kb.addr)
		})
	}
	// The connection opened first is still served.
	corr := bystander.send(kmsg.NewPtrApiVersionsRequest(), 0)
	resp := kmsg.NewPtrApiVersionsResponse()
	bystander.receive(resp, corr, false)
	assert.Equal(t, int16(0), resp.ErrorCode)
	assert.Equal(t, int64(len(cases)), kb.ks.Stats().Rejected)
}

// An ApiVersions newer than the server knows is answered in v0 with
// UNSUPPORTED_VERSION and the supported versions, and the connection stays
// open for the client's retry, as Kafka does.
func TestKafkaApiVersionsTooNewAnswersInV0(t *testing.T) {
	kb := startKafka(t, BrokerConfig{}, kafkawire.Config{})
	c := dialRaw(t, kb.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	corr := c.send(req, 9)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	c.receive(resp, corr, false)
	assert.Equal(t, kerr.UnsupportedVersion.Code, resp.ErrorCode)
	assert.Equal(t, kafkawire.APIs(), resp.ApiKeys)

	corr = c.send(req, 3)
	resp = kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(3)
	c.receive(resp, corr, false) // ApiVersions' response header has no tags, even in v3
	assert.Equal(t, int16(0), resp.ErrorCode)
	assert.Equal(t, kafkawire.APIs(), resp.ApiKeys)
}

// Requests for a topic the broker does not have get Kafka's
// UNKNOWN_TOPIC_OR_PARTITION, per topic or partition, and a corrupt batch
// CORRUPT_MESSAGE; the connection goes on.
func TestKafkaUnknownTopicsAndCorruptBatches(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Replicas: 1}, kafkawire.Config{})
	c := dialRaw(t, kb.addr)

	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("nope")
	meta.Topics = append(meta.Topics, mt)
	corr := c.send(meta, 9)
	mresp := kmsg.NewPtrMetadataResponse()
	mresp.SetVersion(9)
	c.receive(mresp, corr, true)
	require.Len(t, mresp.Topics, 1)
	assert.Equal(t, errUnknownPartition.Code, mresp.Topics[0].ErrorCode)

	prod := kmsg.NewPtrProduceRequest()
	prod.Acks, prod.TimeoutMillis = -1, 5000
	for _, topic := range []string{"nope", "t"} {
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic = topic
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Records = partlog.EncodeBatch([][]byte{[]byte("v")}, time.Now())
		if topic == "t" {
			pp.Records[len(pp.Records)-1] ^= 1 // breaks the CRC
		}
		pt.Partitions = append(pt.Partitions, pp)
		prod.Topics = append(prod.Topics, pt)
	}
	corr = c.send(prod, 9)
	presp := kmsg.NewPtrProduceResponse()
	presp.SetVersion(9)
	c.receive(presp, corr, true)
	require.Len(t, presp.Topics, 2)
	assert.Equal(t, errUnknownPartition.Code, presp.Topics[0].Partitions[0].ErrorCode)
	assert.Equal(t, kerr.CorruptMessage.Code, presp.Topics[1].Partitions[0].ErrorCode)
	require.NotNil(t, presp.Topics[1].Partitions[0].ErrorMessage)

	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxWaitMillis, fetch.MinBytes = 5000, 1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "nope"
	ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
	fetch.Topics = append(fetch.Topics, ft)
	start := time.Now()
	corr = c.send(fetch, 12)
	fresp := kmsg.NewPtrFetchResponse()
	fresp.SetVersion(12)
	c.receive(fresp, corr, true)
	assert.Equal(t, errUnknownPartition.Code, fresp.Topics[0].Partitions[0].ErrorCode)
	assert.Less(t, time.Since(start), 4*time.Second, "an error is answered at once, not at max wait")

	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "nope"
	lt.Partitions = append(lt.Partitions, kmsg.NewListOffsetsRequestTopicPartition())
	lo.Topics = append(lo.Topics, lt)
	corr = c.send(lo, 6)
	lresp := kmsg.NewPtrListOffsetsResponse()
	lresp.SetVersion(6)
	c.receive(lresp, corr, true)
	assert.Equal(t, errUnknownPartition.Code, lresp.Topics[0].Partitions[0].ErrorCode)
	assert.Equal(t, int64(0), kb.ks.Stats().Rejected)
}

// A connection that sends nothing, or stops halfway through a request, is
// closed after the configured timeouts.
func TestKafkaIdleAndSlowConnectionsAreClosed(t *testing.T) {
	kb := startKafka(t, BrokerConfig{}, kafkawire.Config{IdleTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	idle := dialRaw(t, kb.addr)
	half := dialRaw(t, kb.addr)
	half.frame(100, []byte("only ten b"))
	for _, c := range []*rawClient{idle, half} {
		require.NoError(t, c.conn.SetReadDeadline(time.Now().Add(20*time.Second)))
		_, err := io.Copy(io.Discard, c.conn)
		assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "closed by the server")
	}
	works(t, kb.addr)
}
