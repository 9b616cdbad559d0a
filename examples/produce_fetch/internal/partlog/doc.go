// Package partlog is the example broker's partition log: record batches
// stored exactly as producers sent them (Kafka's format v2, possibly
// compressed), with only their base offset rewritten, and the codecs the
// broker's front ends need around them (checking a produced batch,
// up-converting the message sets of Produce v0-2, encoding the HTTP mode's
// batches and decoding them back).
//
// Offsets count records; byte positions count stored batch bytes, which is
// what a fetch's min_bytes and max_bytes are measured in, as in Kafka.
//
// Nothing here waits: the purgatories that park produces and fetches on
// the log are the broker's (package main).
package partlog
