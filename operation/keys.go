package operation

import "fmt"

// TopicPartitionKey watches operations on one partition: produce requests
// waiting for replicas, fetches waiting for bytes.
type TopicPartitionKey struct {
	Topic     string
	Partition int32
}

// String returns Kafka's form of the key: topic-partition.
func (k TopicPartitionKey) String() string { return fmt.Sprintf("%s-%d", k.Topic, k.Partition) }

// TopicKey watches operations on a whole topic, such as topic creation
// waiting for its partitions.
type TopicKey struct{ Topic string }

// String returns the topic.
func (k TopicKey) String() string { return k.Topic }

// MemberKey watches operations of one group member, such as its heartbeat.
type MemberKey struct {
	GroupID  string
	MemberID string
}

// String returns group-member, as Kafka prints it.
func (k MemberKey) String() string { return k.GroupID + "-" + k.MemberID }

// GroupJoinKey watches a group's pending join.
type GroupJoinKey struct{ GroupID string }

// String returns the group id.
func (k GroupJoinKey) String() string { return k.GroupID }

// GroupSyncKey watches a group's pending sync.
type GroupSyncKey struct{ GroupID string }

// String returns the group id.
func (k GroupSyncKey) String() string { return k.GroupID }
