package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
)

// exportedSpan is the part of the stdout exporter's JSON a test reads.
type exportedSpan struct {
	Name        string
	SpanContext struct{ SpanID string }
	Parent      struct{ SpanID string }
	StartTime   time.Time
	EndTime     time.Time
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Status struct{ Code string }
}

func (s exportedSpan) attr(key string) any {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.Value
		}
	}
	return nil
}

// With -trace, each sampled produce's span has a purgatory.wait child that
// covers its stay in the produce purgatory: inside the produce's own span,
// with how it ended, and an error status when the produce expired.
func TestTraceShowsTheProduceWait(t *testing.T) {
	var out bytes.Buffer
	stop, err := startTracing(&out, 1) // every produce
	require.NoError(t, err)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	_, err = RunScenario(ScenarioConfig{
		Duration: 300 * time.Millisecond, ProduceRate: 100, Topics: []string{"a"}, Partitions: 2, Replicas: 2,
		Lag: time.Millisecond, SlowLag: 300 * time.Millisecond, ProduceTimeout: 150 * time.Millisecond,
		MaxWait: 100 * time.Millisecond, MinBytes: 32, Trace: true,
	})
	require.NoError(t, err)
	stop() // flushes the batcher

	produces := map[string]exportedSpan{}
	var waits []exportedSpan
	dec := json.NewDecoder(&out)
	for {
		var s exportedSpan
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		switch s.Name {
		case "produce":
			produces[s.SpanContext.SpanID] = s
		case "purgatory.wait":
			waits = append(waits, s)
		}
	}
	require.NotEmpty(t, waits, "no wait spans in %d bytes of output", out.Len())
	outcomes := map[any]int{}
	for _, w := range waits {
		p, ok := produces[w.Parent.SpanID]
		require.True(t, ok, "a wait span whose parent is not a produce")
		assert.False(t, w.StartTime.Before(p.StartTime), "the wait starts inside its produce")
		assert.False(t, w.EndTime.After(p.EndTime), "the wait ends inside its produce")
		outcome := w.attr("purgatory.outcome")
		outcomes[outcome]++
		if outcome == "expired" {
			assert.Equal(t, "Error", w.Status.Code)
		}
	}
	assert.Positive(t, outcomes["early"], "replicated in time: %v", outcomes)
	assert.Positive(t, outcomes["expired"], "behind the slow follower: %v", outcomes)
}
