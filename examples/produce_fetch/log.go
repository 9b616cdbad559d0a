package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The log of a partition holds record batches exactly as producers sent
// them (Kafka's format v2, possibly compressed), with only their base offset
// rewritten. Offsets count records; byte positions count stored batch bytes,
// which is what a fetch's min_bytes and max_bytes are measured in, as in
// Kafka.

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

// parseBatch checks that raw is exactly one well-formed v2 record batch, as
// Kafka requires of each partition of a produce request from v3 on, and
// returns its header.
func parseBatch(raw []byte) (kmsg.RecordBatch, *kerr.Error, string) {
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

// appendLocked adds a batch that parseBatch accepted at the log end and
// returns its base offset. The caller holds p.mu. The batch is copied: the
// request's buffer is not kept alive by the log.
func (p *partition) appendLocked(raw []byte, numRecords int32) int64 {
	base := p.leo
	b := storedBatch{base: base, next: base + int64(numRecords), pos: p.size, raw: bytes.Clone(raw)}
	binary.BigEndian.PutUint64(b.raw[0:8], uint64(base))
	p.batches = append(p.batches, b)
	p.leo = b.next
	p.size += int64(len(b.raw))
	return base
}

// batchIndexLocked is the index of the batch holding offset o, or
// len(p.batches) if o is at or past the log end.
func (p *partition) batchIndexLocked(o int64) int {
	return sort.Search(len(p.batches), func(i int) bool { return p.batches[i].next > o })
}

// positionLocked is the byte position a read from offset o starts at: the
// start of the batch holding o (a fetch from the middle of a batch gets the
// whole batch, and the client skips the records before o).
func (p *partition) positionLocked(o int64) int64 {
	if i := p.batchIndexLocked(o); i < len(p.batches) {
		return p.batches[i].pos
	}
	return p.size
}

// bytesBetween is how many bytes a read of offsets [from, to) returns; to is
// a batch boundary (the log end or the high watermark).
func (p *partition) bytesBetween(from, to int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from >= to {
		return 0
	}
	return p.positionLocked(to) - p.positionLocked(from)
}

// read returns the batches holding offsets [from, to), whole, up to maxBytes
// in all. If minOne, the first batch is returned even if it is larger than
// maxBytes, as Kafka does for the first partition of a fetch (KIP-74), so a
// large batch cannot stall a consumer.
func (p *partition) read(from, to, maxBytes int64, minOne bool) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]byte
	var n int64
	for i := p.batchIndexLocked(from); i < len(p.batches) && p.batches[i].base < to; i++ {
		raw := p.batches[i].raw
		if n+int64(len(raw)) > maxBytes && !(minOne && len(out) == 0) {
			break
		}
		out = append(out, raw)
		n += int64(len(raw))
	}
	return out
}

// offsetForTimestamp is the base offset of the first batch whose largest
// timestamp is at or after ts, or -1 if there is none: ListOffsets by time,
// at batch granularity.
func (p *partition) offsetForTimestamp(ts int64) (offset, timestamp int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		var rb kmsg.RecordBatch
		if rb.ReadFrom(b.raw) == nil && rb.MaxTimestamp >= ts {
			return b.base, rb.MaxTimestamp
		}
	}
	return -1, -1
}

// encodeBatch builds an uncompressed v2 record batch of values, for the
// HTTP mode's produce, with kmsg's types: each record's length prefix and
// the batch's length and CRC are the only fields that are computed here.
func encodeBatch(values [][]byte, now time.Time) []byte {
	var records []byte
	for i, v := range values {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		r.Value = v
		body := r.AppendTo(nil) // with Length 0, a one-byte varint
		r.Length = int32(len(body) - 1)
		records = r.AppendTo(records)
	}
	ts := now.UnixMilli()
	rb := kmsg.NewRecordBatch()
	rb.Length = int32(batchHeaderLen - 12 + len(records))
	rb.PartitionLeaderEpoch = -1
	rb.Magic = 2
	rb.LastOffsetDelta = int32(len(values) - 1)
	rb.FirstTimestamp, rb.MaxTimestamp = ts, ts
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.NumRecords = int32(len(values))
	rb.Records = records
	raw := rb.AppendTo(nil)
	rb.CRC = int32(crc32.Checksum(raw[crcStart:], castagnoli))
	return rb.AppendTo(raw[:0])
}

var decompressor = kgo.DefaultDecompressor()

// decodeValues returns the values of the records at offsets from and after,
// in the batches a fetch returned, decompressing them if they are
// compressed: the HTTP mode's view of a Kafka producer's batches.
func decodeValues(batches [][]byte, from int64) (values [][]byte, next int64, err error) {
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

// nextOffset is the offset after the last record in batches, or from if
// there are none: where a consumer's next fetch starts.
func nextOffset(batches [][]byte, from int64) int64 {
	next := from
	for _, raw := range batches {
		var rb kmsg.RecordBatch
		if rb.ReadFrom(raw) == nil {
			next = max(next, rb.FirstOffset+int64(rb.LastOffsetDelta)+1)
		}
	}
	return next
}
