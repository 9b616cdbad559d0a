package main

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
)

// encodeOldMessage encodes one message of format v0 or v1, with its size and
// CRC computed.
func encodeOldMessage(magic int8, offset int64, attrs int8, ts int64, key, value []byte) []byte {
	var b []byte
	if magic == 0 {
		m := kmsg.MessageV0{Offset: offset, Magic: 0, Attributes: attrs, Key: key, Value: value}
		b = m.AppendTo(nil)
	} else {
		m := kmsg.MessageV1{Offset: offset, Magic: 1, Attributes: attrs, Timestamp: ts, Key: key, Value: value}
		b = m.AppendTo(nil)
	}
	binary.BigEndian.PutUint32(b[8:12], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[12:16], crc32.ChecksumIEEE(b[16:]))
	return b
}

// Produce v0-2, which the broker advertises for librdkafka's sake, carry
// message sets of formats v0 and v1: each is stored as one v2 batch, a
// compressed one compressed again with the same codec, its records read
// back by a Kafka client at the offsets the broker gave them. A message
// with a bad CRC fails its partition alone, with CORRUPT_MESSAGE.
func TestKafkaProduceOldMessageSetsAreUpConverted(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Topics: []string{"t"}, Partitions: 2}, kafkawire.Config{})
	c := dialRaw(t, kb.addr)
	now := time.Now().UnixMilli()

	// v2 (format v1), gzip: a wrapper whose value is the compressed inner
	// set, inner offsets relative.
	var inner []byte
	for i, v := range []string{"one", "two", "three"} {
		inner = append(inner, encodeOldMessage(1, int64(i), 0, now+int64(i), []byte("k"), []byte(v))...)
	}
	var buf bytes.Buffer
	gz, codec := partlog.Compressor(kgo.CodecGzip).Compress(&buf, inner)
	require.Equal(t, kgo.CodecGzip, codec)
	wrapper := encodeOldMessage(1, 2, 1, now+2, nil, bytes.Clone(gz))
	corrupt := encodeOldMessage(1, 0, 0, now, nil, []byte("bad"))
	corrupt[len(corrupt)-1] ^= 1

	produce := func(version int16, sets map[int32][]byte) *kmsg.ProduceResponse {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = 1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		for p := range int32(2) {
			if set, ok := sets[p]; ok {
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Partition, rp.Records = p, set
				rt.Partitions = append(rt.Partitions, rp)
			}
		}
		req.Topics = append(req.Topics, rt)
		corr := c.send(req, version)
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(version)
		c.receive(resp, corr, false)
		return resp
	}
	resp := produce(2, map[int32][]byte{0: wrapper, 1: corrupt})
	require.Len(t, resp.Topics[0].Partitions, 2)
	assert.Equal(t, int16(0), resp.Topics[0].Partitions[0].ErrorCode)
	assert.Equal(t, int64(0), resp.Topics[0].Partitions[0].BaseOffset)
	assert.Equal(t, kerr.CorruptMessage.Code, resp.Topics[0].Partitions[1].ErrorCode)

	// v0 (format v0), uncompressed, no timestamps.
	set0 := append(encodeOldMessage(0, 0, 0, 0, nil, []byte("four")), encodeOldMessage(0, 1, 0, 0, nil, []byte("five"))...)
	resp = produce(0, map[int32][]byte{0: set0})
	assert.Equal(t, int16(0), resp.Topics[0].Partitions[0].ErrorCode)
	assert.Equal(t, int64(3), resp.Topics[0].Partitions[0].BaseOffset)

	part := kb.b.partitions[tp(0)]
	part.mu.Lock()
	require.Len(t, part.log.Batches(), 2)
	var rb kmsg.RecordBatch
	require.NoError(t, rb.ReadFrom(part.log.Batches()[0]))
	assert.Equal(t, int16(kgo.CodecGzip), rb.Attributes&0x07, "compressed again with the producer's codec")
	assert.Equal(t, int32(3), rb.NumRecords)
	assert.Equal(t, now, rb.FirstTimestamp)
	assert.Equal(t, now+2, rb.MaxTimestamp)
	require.NoError(t, rb.ReadFrom(part.log.Batches()[1]))
	assert.Equal(t, int16(0), rb.Attributes&0x07)
	assert.Equal(t, int64(-1), rb.FirstTimestamp, "format v0 has no timestamps")
	assert.Empty(t, kb.b.partitions[tp(1)].batches(), "the corrupt set was not stored")
	part.mu.Unlock()

	consumer := kb.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart()}}))
	ctx := testCtx(t, 30*time.Second)
	var got []string
	for len(got) < 5 && ctx.Err() == nil {
		fs := consumer.PollFetches(ctx)
		require.NoError(t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) {
			assert.Equal(t, int64(len(got)), r.Offset)
			got = append(got, string(r.Value))
		})
	}
	assert.Equal(t, []string{"one", "two", "three", "four", "five"}, got)
}
