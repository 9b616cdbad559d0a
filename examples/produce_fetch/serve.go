package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
)

// Servers are the front ends ServeAll runs; either may be nil.
type Servers struct {
	HTTP          *http.Server
	HTTPListener  net.Listener
	Kafka         *kafkawire.Server
	KafkaListener net.Listener
	// ShutdownTimeout bounds the shutdown once ctx ends [10s].
	ShutdownTimeout time.Duration
}

// ServeAll serves b on the front ends until ctx ends or one fails, then
// shuts down in the order that leaves no request unanswered:
//
//  1. the Kafka server stops accepting connections and reading requests;
//  2. the broker closes, and its purgatories answer every parked request
//     (acks=all produces with REQUEST_TIMED_OUT, fetches with what is
//     there); a request that arrives after this is refused at once;
//  3. the HTTP server stops accepting and waits for its handlers, which
//     now all have their answers, and the Kafka server writes its answers
//     and closes its connections.
//
// Closing the broker first and the servers after is what makes 3 finish:
// the other way round, the servers would wait for answers that only the
// broker's shutdown (or the requests' timeouts) can give.
func ServeAll(ctx context.Context, b *Broker, s Servers) error {
	if s.ShutdownTimeout <= 0 {
		s.ShutdownTimeout = 10 * time.Second
	}
	errc := make(chan error, 2)
	running := 0
	if s.HTTP != nil {
		running++
		go func() { errc <- s.HTTP.Serve(s.HTTPListener) }()
	}
	if s.Kafka != nil {
		running++
		go func() { errc <- s.Kafka.Serve(s.KafkaListener) }()
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
		running--
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
	defer cancel()
	if s.Kafka != nil {
		s.Kafka.Quiesce()
	}
	errs := []error{first, b.Close(sctx)}
	if s.HTTP != nil {
		errs = append(errs, s.HTTP.Shutdown(sctx))
	}
	if s.Kafka != nil {
		errs = append(errs, s.Kafka.Wait(sctx))
	}
	for range running {
		errs = append(errs, <-errc)
	}
	for i, err := range errs {
		if errors.Is(err, http.ErrServerClosed) {
			errs[i] = nil
		}
	}
	return errors.Join(errs...)
}
