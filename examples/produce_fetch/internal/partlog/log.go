package partlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Log is one partition's log: the record batches appended to it, in
// order, and where it ends. It is not safe for concurrent use: the
// partition that owns it guards it with its own lock, which also guards
// the replication state that must change in step with the log.
type Log struct {
	batches []storedBatch // those holding offsets at or after start
	start   int64         // log start offset: the first offset a read may ask for
	end     int64         // log end offset: the offset the next record gets
	size    int64         // bytes of all batches ever appended
}

// storedBatch is one batch in a partition's log.
type storedBatch struct {
	base int64  // offset of its first record
	next int64  // offset after its last record
	pos  int64  // bytes of the log before it
	raw  []byte // the batch, its base offset set to base
}

// batchHeaderLen is the size of a v2 batch before its records; the CRC
// covers everything from the attributes (byte 21) on, so setting the base
// offset (bytes 0 to 8) leaves it valid.
const (
	batchHeaderLen = 61
	crcStart       = 21
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ParseBatch checks that raw is exactly one well-formed v2 record batch, as
// Kafka requires of each partition of a produce request from v3 on, and
// returns its header.
func ParseBatch(raw []byte) (kmsg.RecordBatch, *kerr.Error, string) {
	var rb kmsg.RecordBatch
	if len(raw) < batchHeaderLen {
		return rb, kerr.CorruptMessage, fmt.Sprintf("%d bytes is shorter than a record batch header", len(raw))
	}
	// The batch's own length field says where it ends; anything after it
	// would be a second batch.
	if n := int64(binary.BigEndian.Uint32(raw[8:12])) + 12; n < int64(len(raw)) {
		return rb, kerr.InvalidRecord, "a produce request must carry exactly one record batch per partition"
	}
	if err := rb.ReadFrom(raw); err != nil {
		return rb, kerr.CorruptMessage, "record batch: " + err.Error()
	}
	switch {
	case rb.Magic != 2:
		return rb, kerr.UnsupportedForMessageFormat, fmt.Sprintf("record batch magic %d; only 2 is supported", rb.Magic)
	case rb.NumRecords <= 0 || rb.LastOffsetDelta != rb.NumRecords-1:
		return rb, kerr.InvalidRecord, fmt.Sprintf("record batch of %d records with last offset delta %d", rb.NumRecords, rb.LastOffsetDelta)
	case crc32.Checksum(raw[crcStart:], castagnoli) != uint32(rb.CRC):
		return rb, kerr.CorruptMessage, "record batch CRC mismatch"
	}
	return rb, nil, ""
}

// Append adds a batch that ParseBatch accepted at the log end and returns
// its base offset. The batch is copied: the request's buffer is not kept
// alive by the log.
func (l *Log) Append(raw []byte, numRecords int32) int64 {
	base := l.end
	b := storedBatch{base: base, next: base + int64(numRecords), pos: l.size, raw: bytes.Clone(raw)}
	binary.BigEndian.PutUint64(b.raw[0:8], uint64(base))
	l.batches = append(l.batches, b)
	l.end = b.next
	l.size += int64(len(b.raw))
	return base
}

// End is the log end offset: the offset the next record appended gets.
func (l *Log) End() int64 { return l.end }

// Start is the log start offset: offsets below it are deleted. It only
// rises.
func (l *Log) Start() int64 { return l.start }

// DeleteBefore moves the log start offset up to offset, which the caller
// has checked is at most End (Kafka's maybeIncrementLogStartOffset), and
// drops the batches wholly below it. A batch that straddles the new start
// is kept whole: a read from inside it returns the whole batch, and the
// client skips the records before its offset, as for any read. Byte
// positions are those of the whole log's history, so they do not move.
// An offset at or below Start changes nothing.
func (l *Log) DeleteBefore(offset int64) {
	if offset <= l.start {
		return
	}
	l.start = offset
	i := l.batchIndex(offset)
	l.batches = slices.Delete(l.batches, 0, i)
}

// Batches returns the stored batches, in order, each as it is served.
func (l *Log) Batches() [][]byte {
	out := make([][]byte, len(l.batches))
	for i, b := range l.batches {
		out[i] = b.raw
	}
	return out
}

// batchIndex is the index of the batch holding offset o, or len(l.batches)
// if o is at or past the log end.
func (l *Log) batchIndex(o int64) int {
	return sort.Search(len(l.batches), func(i int) bool { return l.batches[i].next > o })
}

// position is the byte position a read from offset o starts at: the start
// of the batch holding o (a fetch from the middle of a batch gets the whole
// batch, and the client skips the records before o).
func (l *Log) position(o int64) int64 {
	if i := l.batchIndex(o); i < len(l.batches) {
		return l.batches[i].pos
	}
	return l.size
}

// BytesBetween is how many bytes a read of offsets [from, to) returns; to
// is a batch boundary (the log end or the high watermark).
func (l *Log) BytesBetween(from, to int64) int64 {
	if from >= to {
		return 0
	}
	return l.position(to) - l.position(from)
}

// Read returns the batches holding offsets [from, to), whole, up to maxBytes
// in all. If minOne, the first batch is returned even if it is larger than
// maxBytes, as Kafka does for the first partition of a fetch (KIP-74), so a
// large batch cannot stall a consumer.
func (l *Log) Read(from, to, maxBytes int64, minOne bool) [][]byte {
	var out [][]byte
	var n int64
	for i := l.batchIndex(from); i < len(l.batches) && l.batches[i].base < to; i++ {
		raw := l.batches[i].raw
		if n+int64(len(raw)) > maxBytes && !(minOne && len(out) == 0) {
			break
		}
		out = append(out, raw)
		n += int64(len(raw))
	}
	return out
}

// OffsetForTimestamp is the base offset of the first batch whose largest
// timestamp is at or after ts, or -1 if there is none: ListOffsets by time,
// at batch granularity.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64) {
	for _, b := range l.batches {
		var rb kmsg.RecordBatch
		if rb.ReadFrom(b.raw) == nil && rb.MaxTimestamp >= ts {
			return max(b.base, l.start), rb.MaxTimestamp
		}
	}
	return -1, -1
}

// EncodeBatch builds an uncompressed v2 record batch of values, for the
// HTTP mode's produce, with kmsg's types: each record's length prefix and
// the batch's length and CRC are the only fields that are computed here.
func EncodeBatch(values [][]byte, now time.Time) []byte {
	recs := make([]oldMessage, len(values))
	for i, v := range values {
		recs[i] = oldMessage{value: v, timestamp: now.UnixMilli()}
	}
	return encodeRecords(recs, kgo.CodecNone)
}

// encodeRecords builds one v2 batch of recs, compressed with codec.
func encodeRecords(recs []oldMessage, codec kgo.CompressionCodecType) []byte {
	var records []byte
	first, maxTS := int64(-1), int64(-1)
	if len(recs) > 0 {
		first = recs[0].timestamp
	}
	for i, m := range recs {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		if first >= 0 && m.timestamp >= 0 {
			r.TimestampDelta64 = m.timestamp - first
		}
		maxTS = max(maxTS, m.timestamp)
		r.Key, r.Value = m.key, m.value
		body := r.AppendTo(nil) // with Length 0, a one-byte varint
		r.Length = int32(len(body) - 1)
		records = r.AppendTo(records)
	}
	var attrs int16
	if codec != kgo.CodecNone {
		var buf bytes.Buffer
		if out, used := Compressor(codec).Compress(&buf, records); used == codec {
			records, attrs = bytes.Clone(out), int16(codec)
		}
	}
	rb := kmsg.NewRecordBatch()
	rb.Length = int32(batchHeaderLen - 12 + len(records))
	rb.PartitionLeaderEpoch = -1
	rb.Magic = 2
	rb.Attributes = attrs
	rb.LastOffsetDelta = int32(len(recs) - 1)
	rb.FirstTimestamp, rb.MaxTimestamp = first, maxTS
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.NumRecords = int32(len(recs))
	rb.Records = records
	raw := rb.AppendTo(nil)
	rb.CRC = int32(crc32.Checksum(raw[crcStart:], castagnoli))
	return rb.AppendTo(raw[:0])
}

// Compressor returns a compressor for one codec.
func Compressor(codec kgo.CompressionCodecType) kgo.Compressor {
	var cc kgo.CompressionCodec
	switch codec {
	case kgo.CodecGzip:
		cc = kgo.GzipCompression()
	case kgo.CodecSnappy:
		cc = kgo.SnappyCompression()
	case kgo.CodecLz4:
		cc = kgo.Lz4Compression()
	default:
		cc = kgo.ZstdCompression()
	}
	c, _ := kgo.DefaultCompressor(cc) // a known codec: no error
	return c
}

// oldMessage is one message of a v0 or v1 message set: a record before
// record batches.
type oldMessage struct {
	timestamp  int64 // -1 for v0, which has none
	key, value []byte
}

// UpConvertMessageSet turns the message set of a Produce v0-2 (message
// format v0 or v1) into one v2 record batch, as Kafka's LogValidator does
// on append when the log's format is v2: every log here holds v2 batches,
// which is all Fetch v4+ serves. A compressed wrapper message's inner
// messages become the batch's records, compressed again with the same
// codec, as Kafka keeps the producer's codec; the message set's own
// offsets are ignored, as the broker assigns offsets. The message set must
// be whole, each message's CRC right, and at most one level of nesting.
//
// Why serve Produce v0-2 at all: librdkafka before 2.11.1 decides whether
// it may compress a batch with gzip, snappy or lz4 by asking whether the
// broker's Produce range overlaps [0, 0] (rd_kafka_msgset_writer_select_MsgVersion,
// rdkafka_msgset_writer.c), and for lz4 also whether FindCoordinator v0
// is there (rdkafka_feature.c). A broker advertising Produce from v3 gets
// its batches uncompressed, with "Broker does not support compression
// type gzip: not compressing batch" in librdkafka's log. Those librdkafka
// versions still send Produce v3+ with v2 batches once Produce v0 is
// advertised; the older versions are here so that what is advertised is
// served.
func UpConvertMessageSet(raw []byte) (batch []byte, numRecords int32, e *kerr.Error, msg string) {
	outer, codec, err := readMessageSet(raw, true)
	if err != nil {
		return nil, 0, kerr.CorruptMessage, "message set: " + err.Error()
	}
	if len(outer) == 0 {
		return nil, 0, kerr.InvalidRecord, "an empty message set"
	}
	return encodeRecords(outer, codec), int32(len(outer)), nil, ""
}

// readMessageSet reads a v0/v1 message set, unwrapping compressed
// wrapper messages when top is set (inner messages are never compressed).
// It returns the messages and the codec of the first compressed wrapper.
func readMessageSet(raw []byte, top bool) ([]oldMessage, kgo.CompressionCodecType, error) {
	var out []oldMessage
	codec := kgo.CodecNone
	for len(raw) > 0 {
		if len(raw) < 12+14 { // offset, size, and the smallest v0 message
			return nil, 0, fmt.Errorf("%d bytes left, short of a message", len(raw))
		}
		size := int64(binary.BigEndian.Uint32(raw[8:12]))
		if size < 14 || size > int64(len(raw)-12) {
			return nil, 0, fmt.Errorf("message size %d with %d bytes left", size, len(raw)-12)
		}
		msg := raw[:12+size]
		raw = raw[12+size:]
		if crc32.ChecksumIEEE(msg[16:]) != binary.BigEndian.Uint32(msg[12:16]) {
			return nil, 0, errors.New("message CRC mismatch")
		}
		var m oldMessage
		var attrs int8
		switch magic := msg[16]; magic {
		case 0:
			var v kmsg.MessageV0
			if err := v.ReadFrom(msg); err != nil {
				return nil, 0, err
			}
			m, attrs = oldMessage{timestamp: -1, key: v.Key, value: v.Value}, v.Attributes
		case 1:
			var v kmsg.MessageV1
			if err := v.ReadFrom(msg); err != nil {
				return nil, 0, err
			}
			m, attrs = oldMessage{timestamp: v.Timestamp, key: v.Key, value: v.Value}, v.Attributes
		default:
			return nil, 0, fmt.Errorf("message magic %d in a message set", magic)
		}
		c := kgo.CompressionCodecType(attrs & 0x07)
		if c == kgo.CodecNone {
			out = append(out, m)
			continue
		}
		if !top {
			return nil, 0, errors.New("a compressed message inside a compressed message")
		}
		inner, err := decompressor.Decompress(m.value, c)
		if err != nil {
			return nil, 0, fmt.Errorf("decompressing a wrapper message: %w", err)
		}
		msgs, _, err := readMessageSet(inner, false)
		if err != nil {
			return nil, 0, err
		}
		if codec == kgo.CodecNone {
			codec = c
		}
		out = append(out, msgs...)
	}
	return out, codec, nil
}

var decompressor = kgo.DefaultDecompressor()

// DecodeValues returns the values of the records at offsets from and after,
// in the batches a fetch returned, decompressing them if they are
// compressed: the HTTP mode's view of a Kafka producer's batches.
func DecodeValues(batches [][]byte, from int64) (values [][]byte, next int64, err error) {
	next = from
	for _, raw := range batches {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw); err != nil {
			return nil, next, err
		}
		recs := rb.Records
		if codec := kgo.CompressionCodecType(rb.Attributes & 0x07); codec != kgo.CodecNone {
			if recs, err = decompressor.Decompress(recs, codec); err != nil {
				return nil, next, err
			}
		}
		for range rb.NumRecords {
			length, n := kbin.Varint(recs)
			if n == 0 || length < 0 || int(length) > len(recs)-n {
				return nil, next, fmt.Errorf("record batch at offset %d: truncated record", rb.FirstOffset)
			}
			var r kmsg.Record
			if err := r.ReadFrom(recs[:n+int(length)]); err != nil {
				return nil, next, err
			}
			recs = recs[n+int(length):]
			if off := rb.FirstOffset + int64(r.OffsetDelta); off >= from {
				values = append(values, r.Value)
				next = off + 1
			}
		}
	}
	return values, next, nil
}

// NextOffset is the offset after the last record in batches, or from if
// there are none: where a consumer's next fetch starts.
func NextOffset(batches [][]byte, from int64) int64 {
	next := from
	for _, raw := range batches {
		var rb kmsg.RecordBatch
		if rb.ReadFrom(raw) == nil {
			next = max(next, rb.FirstOffset+int64(rb.LastOffsetDelta)+1)
		}
	}
	return next
}
