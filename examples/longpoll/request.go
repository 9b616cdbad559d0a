package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// What a client may send, and for how long (README, "Limits").
const (
	defaultTimeout     = "30s"
	maxTimeout         = 5 * time.Minute // longer waits are refused with 400
	maxKeyBytes        = 1024            // longer keys are refused with 400
	maxValueBytes      = 1 << 20         // larger bodies are refused with 413
	defaultBodyTimeout = 10 * time.Second
	maxHeaderBytes     = 64 << 10 // request line and headers; net/http answers 431 past it
)

// errHungUp is the Cause of a poll whose client went away: the handler
// completes the poll with it (purgatory.Complete).
var errHungUp = errors.New("longpoll: client hung up")

// keyOf returns the request's key, or answers 400 and returns false. The
// key is copied: the purgatory keeps the keys of recently emptied watch
// lists for a while, and a key that was a slice of the request's URL would
// keep the whole request line alive with it.
func keyOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.URL.Query().Get("key")
	switch {
	case key == "":
		http.Error(w, "key is required", http.StatusBadRequest)
		return "", false
	case len(key) > maxKeyBytes:
		http.Error(w, fmt.Sprintf("key is %d bytes, more than %d", len(key), maxKeyBytes), http.StatusBadRequest)
		return "", false
	}
	return strings.Clone(key), true
}

// bodyDeadline bounds the time a request's body may take to arrive, from
// now. Without it a client sending one byte now and then holds a handler,
// and the connection or HTTP/2 stream under it, for as long as it likes;
// and a handler that does not read its body (a 405, a poll) would leave
// net/http reading it, just as slowly, once it returns. It is set only
// for requests with a body: on HTTP/1.1 a read deadline also ends the
// wait for a hang-up, which would cancel a parked poll's context.
func (s *server) bodyDeadline(w http.ResponseWriter) {
	// Not supported by a ResponseRecorder; the tests over TCP cover it.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.body))
}

// readBody reads a notify's body: 413 past maxValueBytes, 408 when it has
// not arrived by the body deadline.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) (string, bool) {
	if r.ContentLength > maxValueBytes {
		tooLarge(w)
		return "", false
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValueBytes))
	var big *http.MaxBytesError
	switch {
	case errors.As(err, &big):
		tooLarge(w)
		return "", false
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("the body did not arrive within %v", s.body), http.StatusRequestTimeout)
		return "", false
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return "", false
	}
	// The body is in: nothing more is read until the answer is written.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return string(value), true
}

func tooLarge(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	http.Error(w, fmt.Sprintf("a value is at most %d bytes", maxValueBytes), http.StatusRequestEntityTooLarge)
}

// unavailable answers 503 naming the store: try again in a second, here
// or on another server.
func (s *server) unavailable(w http.ResponseWriter) {
	unavailable(w, fmt.Sprintf("store unreachable: %v", s.store))
}

func unavailable(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, why, http.StatusServiceUnavailable)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// serve serves s on ln until ctx ends, then stops in the order that leaves
// no poll hanging: the purgatory's Shutdown answers every parked poll
// first, so that the HTTP server's Shutdown, which waits for running
// handlers, finds them finishing. The other way round it would wait for
// the polls' timeouts.
//
// Besides HTTP/1.1 it speaks HTTP/2 without TLS (curl
// --http2-prior-knowledge), which carries many polls on one connection.
// There is no ReadTimeout: it would end parked polls; bodies have a
// deadline of their own (bodyDeadline).
func serve(ctx context.Context, ln net.Listener, s *server) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler:           s,
		Protocols:         &protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 1000},
		ReadHeaderTimeout: 5 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		WriteTimeout:      maxTimeout + 10*time.Second, // must outlast the longest poll
		IdleTimeout:       time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return errors.Join(err, s.close(context.Background()))
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := errors.Join(s.close(sctx), hs.Shutdown(sctx))
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
