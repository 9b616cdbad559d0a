// Command longpoll is a long-poll HTTP server on a purgatory. Clients wait
// for a key to change; a notify answers every client waiting on its key.
//
//	GET  /wait?key=K&after=V&timeout=D  200 {"key","version","value"} once K's version exceeds V,
//	                                    204 at the timeout, 503 + Retry-After when full or stopping
//	POST /notify?key=K                  stores the body as K's value: 200 {"version","woken"}
//	GET  /metrics                       the purgatory's figures for Prometheus
//
// bench_test.go compares it with the usual Go long poll: a channel per key
// and a time.After per request.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	purgatoryprom "github.com/purgatory-go/purgatory/contrib/prometheus"
	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

const (
	defaultTimeout = "30s"
	maxTimeout     = 5 * time.Minute // longer waits are refused with 400
	maxValueBytes  = 1 << 20
)

// poll is one GET /wait. TryComplete runs with the poll's lock held and
// takes the store's lock inside it (see notify). OnComplete runs once, on
// whichever goroutine completed the poll (a notify's, the reaper's at the
// timeout, the context's when the client hangs up, Shutdown's), so it only
// hands the cause to the handler, which writes the answer, and never blocks.
type poll struct {
	operation.Base
	store *store
	key   string
	after uint64
	done  chan error // buffered 1: OnComplete's send never waits
}

func (p *poll) TryComplete() bool {
	if p.store.get(p.key).Version > p.after {
		return p.ForceComplete()
	}
	return false
}

func (p *poll) OnComplete()   { p.done <- p.Cause() } // nil when a version past after arrived
func (p *poll) OnExpiration() {}

type server struct {
	store store
	polls *purgatory.Purgatory[string, *poll]
	times timing.Recorder // time in purgatory by outcome, for /metrics
	mux   http.ServeMux
}

// newServer returns a server that parks at most maxPending polls at once;
// zero means no bound. Shutting its purgatory down answers the parked
// polls with 503, and later ones the same way.
func newServer(maxPending int) (*server, error) {
	s := &server{}
	var err error
	s.polls, err = purgatory.New[string, *poll]("LongPoll",
		purgatory.WithMaxPending(maxPending), purgatory.WithObserver(&s.times))
	if err != nil {
		return nil, err
	}
	metrics := purgatoryprom.NewCollector()
	_ = metrics.Add("LongPoll", s.polls, purgatoryprom.WithTimes(&s.times)) // one fixed, valid name
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	s.mux.HandleFunc("GET /wait", s.wait)
	s.mux.HandleFunc("POST /notify", s.notify)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *server) wait(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("key")
	after, aerr := strconv.ParseUint(cmp.Or(q.Get("after"), "0"), 10, 64)
	timeout, terr := time.ParseDuration(cmp.Or(q.Get("timeout"), defaultTimeout))
	switch {
	case key == "":
		http.Error(w, "key is required", http.StatusBadRequest)
		return
	case aerr != nil:
		http.Error(w, "after must be a version: a non-negative integer", http.StatusBadRequest)
		return
	case terr != nil || timeout < 0 || timeout > maxTimeout:
		http.Error(w, fmt.Sprintf("timeout must be a Go duration from 0s to %v", maxTimeout), http.StatusBadRequest)
		return
	}
	p := &poll{store: &s.store, key: key, after: after, done: make(chan error, 1)}
	// The request's context ends when the client hangs up: the poll then
	// leaves the purgatory at once instead of holding its place until the
	// timeout.
	p.Init(p, timeout, operation.WithContext(r.Context()))
	if _, err := s.polls.TryCompleteElseWatch(p, p.key); err != nil {
		// ErrFull (WithMaxPending) or ErrShutdown: nothing was parked.
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	switch cause := <-p.done; {
	case cause == nil:
		// Versions only rise, so the value read now is past after too,
		// and is the newest there is.
		writeJSON(w, s.store.get(p.key).answer(p.key))
	case errors.Is(cause, operation.ErrExpired):
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(cause, purgatory.ErrShutdown):
		// The server is stopping before the timeout the client asked for:
		// 503 tells it to retry, here or elsewhere, rather than 204's
		// "nothing changed", which would be a claim about a wait not made.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
	default: // the client hung up: nobody to answer
	}
}

func (s *server) notify(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		http.Error(w, "key is required", http.StatusBadRequest)
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValueBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// Store first, check second. A poll being parked now either sees the
	// new version in the TryComplete that TryCompleteElseWatch makes after
	// watching the key, or is watched by the time CheckAndComplete looks:
	// the purgatory's lock story covers both. Checking before storing would
	// let a poll parked in between wait for the next notify or its timeout.
	//
	// put releases the store's lock before the check. CheckAndComplete runs
	// each poll's TryComplete, which takes that lock to read the version:
	// held across the check, a sync.Mutex would deadlock this goroutine on
	// the first poll it tried.
	version := s.store.put(key, string(value))
	woken := s.polls.CheckAndComplete(key)
	writeJSON(w, map[string]any{"version": version, "woken": woken})
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
func serve(ctx context.Context, ln net.Listener, s *server) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler:           s,
		Protocols:         &protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 1000},
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      maxTimeout + 10*time.Second, // must outlast the longest poll
		IdleTimeout:       time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return errors.Join(err, s.polls.Shutdown(context.Background()))
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := errors.Join(s.polls.Shutdown(sctx), hs.Shutdown(sctx))
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	maxPending := flag.Int("max-pending", 100_000, "polls parked at once before 503 (0: no bound)")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s, err := newServer(*maxPending)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on http://%s; Ctrl-C answers the parked polls and stops", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = serve(ctx, ln, s)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}
