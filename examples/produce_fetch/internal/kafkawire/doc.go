// Package kafkawire serves the example broker over Kafka's wire protocol:
// enough of it for Kafka clients (kcat, franz-go, librdkafka) with their
// default settings to produce, consume, and consume in groups. kmsg
// encodes and decodes every request and response; this package frames
// them, keeps each connection's answers in order, answers the requests
// that never wait (ApiVersions, Metadata, ListOffsets, InitProducerId,
// FindCoordinator), and hands the rest on: the group APIs to the group
// coordinator (internal/groups), Produce and Fetch to the [Broker], which
// parks them in its purgatories.
//
// Bad input costs only its own connection: a frame of a bad size, an
// unknown API key or version, or a body that does not parse closes it, as
// Kafka does.
package kafkawire
