package main

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/groups"
	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
)

// The Kafka front end (internal/kafkawire) frames requests and answers the
// ones that do not wait itself; the requests that park in the broker's
// purgatories come here, through wireBroker, and are turned into
// ProduceFunc and FetchFunc (requests.go), the calls the HTTP front end
// makes too, and their answers back into kmsg responses.

// NewKafkaServer returns a server of Kafka's protocol for b.
func NewKafkaServer(b *Broker, cfg kafkawire.Config) *kafkawire.Server {
	return kafkawire.NewServer(wireBroker{b}, cfg)
}

// wireBroker is the broker as the Kafka front end sees it
// (kafkawire.Broker).
type wireBroker struct{ b *Broker }

func (w wireBroker) Topics() []string { return w.b.Topics() }

func (w wireBroker) Groups() *groups.Coordinator { return w.b.groups.Coordinator }

// TopicPartitions describes topic's partitions, in order; nil if there is
// no such topic.
func (w wireBroker) TopicPartitions(topic string) []kafkawire.PartitionState {
	parts := w.b.topics[topic]
	if parts == nil {
		return nil
	}
	out := make([]kafkawire.PartitionState, 0, len(parts))
	for _, p := range parts {
		out = append(out, p.wireState())
	}
	return out
}

// Partition describes tp, or reports that there is no such partition.
func (w wireBroker) Partition(tp tpKey) (kafkawire.PartitionState, bool) {
	p := w.b.partitions[tp]
	if p == nil {
		return kafkawire.PartitionState{}, false
	}
	return p.wireState(), true
}

func (p *partition) wireState() kafkawire.PartitionState {
	st := p.state()
	return kafkawire.PartitionState{Partition: p.key.Partition, Leader: st.leader, LogStart: st.logStart,
		HighWatermark: st.hw, Replicas: st.all, ISR: st.isr}
}

func (w wireBroker) OffsetForTimestamp(tp tpKey, ts int64) (offset, timestamp int64) {
	if p := w.b.partitions[tp]; p != nil {
		return p.offsetForTimestamp(ts)
	}
	return -1, -1
}

// Produce turns a Produce request into ProduceFunc and its answer back.
func (w wireBroker) Produce(req *kmsg.ProduceRequest, answer func(kmsg.Response)) {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	pr := ProduceRequest{Acks: int(req.Acks), Timeout: time.Duration(max(req.TimeoutMillis, 0)) * time.Millisecond}
	slots := map[tpKey]*kmsg.ProduceResponseTopicPartition{}
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i, t := range req.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		for j, p := range t.Partitions {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.BaseOffset = -1
			tp := tpKey{Topic: t.Topic, Partition: p.Partition}
			if slots[tp] != nil {
				rp.ErrorCode = kerr.InvalidRequest.Code
				msg := "partition named twice in one request"
				rp.ErrorMessage = &msg
				continue
			}
			slots[tp] = rp
			batch := p.Records
			if req.Version < 3 {
				// A message set of the old formats: stored as a v2 batch.
				var e *kerr.Error
				var msg string
				if batch, _, e, msg = partlog.UpConvertMessageSet(p.Records); e != nil {
					rp.ErrorCode = e.Code
					rp.ErrorMessage = &msg
					continue
				}
			}
			pr.Partitions = append(pr.Partitions, ProducePartition{TP: tp, Batch: batch})
		}
	}
	w.b.ProduceFunc(pr, func(r ProduceResponse) {
		for _, p := range r.Partitions {
			rp := slots[p.TP]
			if p.Err != nil {
				rp.ErrorCode = p.Err.Code
			}
			if p.Message != "" {
				msg := p.Message
				rp.ErrorMessage = &msg
			}
			rp.BaseOffset = p.BaseOffset
			rp.LogAppendTime = -1 // the producer's timestamps are kept (CreateTime)
			rp.LogStartOffset = 0
		}
		answer(resp)
	})
}

// Fetch turns a Fetch request into FetchFunc and its answer back. Fetch
// sessions (KIP-227) are not kept: every answer says session 0, which tells
// the client to send full requests, and an incremental one is refused.
func (w wireBroker) Fetch(req *kmsg.FetchRequest, answer func(kmsg.Response)) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	if req.SessionID != 0 || req.SessionEpoch > 0 {
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		answer(resp)
		return
	}
	fr := FetchRequest{MinBytes: int64(req.MinBytes), MaxBytes: int64(req.MaxBytes),
		MaxWait:   time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond,
		Committed: req.ReplicaID < 0} // consumers read below the high watermark
	slots := map[tpKey]*kmsg.FetchResponseTopicPartition{}
	resp.Topics = make([]kmsg.FetchResponseTopic, len(req.Topics))
	for i, t := range req.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
		for j, p := range t.Partitions {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			// Empty, not null: librdkafka cannot parse a null record set.
			rp.RecordBatches = []byte{}
			tp := tpKey{Topic: t.Topic, Partition: p.Partition}
			if slots[tp] != nil {
				rp.ErrorCode = kerr.InvalidRequest.Code
				continue
			}
			slots[tp] = rp
			fr.Partitions = append(fr.Partitions, FetchPartitionRequest{TP: tp, Offset: p.FetchOffset, MaxBytes: int64(p.PartitionMaxBytes)})
		}
	}
	w.b.FetchFunc(fr, func(r FetchResponse) {
		for _, p := range r.Partitions {
			rp := slots[p.TP]
			if p.Err != nil {
				rp.ErrorCode = p.Err.Code
				continue
			}
			rp.HighWatermark = p.HighWatermark
			rp.LastStableOffset = p.HighWatermark // no transactions: nothing is unstable
			rp.LogStartOffset = p.LogStartOffset
			for _, b := range p.Batches {
				rp.RecordBatches = append(rp.RecordBatches, b...)
			}
		}
		answer(resp)
	})
}

// DeleteRecords turns a DeleteRecords request into DeleteRecordsFunc
// (delayed_delete_records.go) and its answer back.
func (w wireBroker) DeleteRecords(req *kmsg.DeleteRecordsRequest, answer func(kmsg.Response)) {
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	dr := DeleteRecordsRequest{Timeout: time.Duration(max(req.TimeoutMillis, 0)) * time.Millisecond}
	slots := map[tpKey]*kmsg.DeleteRecordsResponseTopicPartition{}
	resp.Topics = make([]kmsg.DeleteRecordsResponseTopic, len(req.Topics))
	for i, t := range req.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.DeleteRecordsResponseTopicPartition, len(t.Partitions))
		for j, p := range t.Partitions {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.LowWatermark = -1
			tp := tpKey{Topic: t.Topic, Partition: p.Partition}
			if slots[tp] != nil {
				rp.ErrorCode = kerr.InvalidRequest.Code // named twice in one request
				continue
			}
			slots[tp] = rp
			dr.Partitions = append(dr.Partitions, DeleteRecordsPartition{TP: tp, Offset: p.Offset})
		}
	}
	w.b.DeleteRecordsFunc(dr, func(r DeleteRecordsResponse) {
		for _, p := range r.Partitions {
			rp := slots[p.TP]
			if p.Err != nil {
				rp.ErrorCode = p.Err.Code
			}
			rp.LowWatermark = p.LowWatermark
		}
		answer(resp)
	})
}
