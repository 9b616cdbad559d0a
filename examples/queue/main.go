// Command queue is a message queue in the manner of Amazon SQS, over HTTP,
// on one purgatory. A receive that finds no message parks, watched by its
// queue, until a message is visible or its wait ends; a message's delay and
// its visibility timeouts are tasks on the purgatory's timer.
//
//	POST   /queues/{q}/messages?delay=D                     the body is a message: 200 {"id"}
//	GET    /queues/{q}/messages?max=N&visibility=D&wait=D   200 {"messages":[...]}: up to N visible
//	                                                         messages, in flight for D, at once or
//	                                                         when one is visible; none after the wait
//	DELETE /queues/{q}/messages/{receipt}                   204; 410 once the receipt has expired
//	POST   /queues/{q}/messages/{receipt}/visibility?timeout=D   204; 410 likewise
//	GET    /queues/{q}                                      200 {"visible","in_flight","delayed"}
//
// queue.go is the queue; bench_test.go compares it with the same service
// written the usual Go way (naive_test.go).
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
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// Limits, as SQS's where it has one. Values outside them are refused with 400.
const (
	maxBodyBytes      = 256 << 10
	maxReceive        = 10
	defaultWait       = 20 * time.Second
	maxWait           = 5 * time.Minute
	defaultVisibility = 30 * time.Second
	maxVisibility     = 12 * time.Hour
	maxDelay          = 15 * time.Minute
)

var queueName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// server is the HTTP face of a service.
type server struct {
	svc *service
	mux http.ServeMux
}

// config is what main's flags and the tests set.
type config struct {
	maxPending int         // receives parked at once before 503; zero means no bound
	timer      timer.Timer // nil: a SystemTimer that the purgatory's reaper advances
	noReaper   bool        // the caller advances timer (a test's MockTimer)
}

func newServer(c config) (*server, error) {
	t := c.timer
	if t == nil {
		var err error
		if t, err = newSystemTimer(); err != nil {
			return nil, err
		}
	}
	opts := []purgatory.Option{purgatory.WithMaxPending(c.maxPending)}
	if c.noReaper {
		opts = append(opts, purgatory.WithoutReaper())
	}
	svc, err := newService(t, opts...)
	if err != nil {
		_ = t.Close()
		return nil, err
	}
	s := &server{svc: svc}
	s.mux.HandleFunc("POST /queues/{q}/messages", s.send)
	s.mux.HandleFunc("GET /queues/{q}/messages", s.receive)
	s.mux.HandleFunc("DELETE /queues/{q}/messages/{receipt}", s.delete)
	s.mux.HandleFunc("POST /queues/{q}/messages/{receipt}/visibility", s.changeVisibility)
	s.mux.HandleFunc("GET /queues/{q}", s.stats)
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// queue returns the queue the request names, or answers 400 and nil. The
// handler lets go of it (service.release) when it returns.
func (s *server) queue(w http.ResponseWriter, r *http.Request) *queue {
	name, ok := queueNameOf(w, r)
	if !ok {
		return nil
	}
	return s.svc.queue(name)
}

// queueNameOf returns the queue name the request's path gives, or answers
// 400 and reports false.
func queueNameOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("q")
	if !queueName.MatchString(name) {
		http.Error(w, "a queue name is 1 to 80 letters, digits, - and _", http.StatusBadRequest)
		return "", false
	}
	return name, true
}

// duration parses the query parameter name, def if absent, and reports
// false (having answered 400) if it is not a Go duration from 0 to most.
func duration(w http.ResponseWriter, r *http.Request, name string, def, most time.Duration) (time.Duration, bool) {
	d, err := time.ParseDuration(cmp.Or(r.URL.Query().Get(name), def.String()))
	if err != nil || d < 0 || d > most {
		http.Error(w, fmt.Sprintf("%s must be a Go duration from 0s to %v", name, most), http.StatusBadRequest)
		return 0, false
	}
	return d, true
}

func (s *server) send(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	defer s.svc.release(q)
	delay, ok := duration(w, r, "delay", 0, maxDelay)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id, err := q.send(string(body), delay)
	if err != nil {
		unavailable(w, "server shutting down")
		return
	}
	writeJSON(w, map[string]string{"id": id})
}

func (s *server) receive(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	defer s.svc.release(q)
	most, err := strconv.Atoi(cmp.Or(r.URL.Query().Get("max"), "1"))
	if err != nil || most < 1 || most > maxReceive {
		http.Error(w, fmt.Sprintf("max must be from 1 to %d", maxReceive), http.StatusBadRequest)
		return
	}
	vis, ok := duration(w, r, "visibility", defaultVisibility, maxVisibility)
	if !ok {
		return
	}
	wait, ok := duration(w, r, "wait", defaultWait, maxWait)
	if !ok {
		return
	}
	msgs, ok, err := s.svc.receive(r.Context(), q, most, vis, wait)
	switch {
	case err != nil: // purgatory.ErrFull or ErrShutdown
		unavailable(w, err.Error())
	case ok:
		if msgs == nil {
			msgs = []Message{} // [], not null
		}
		writeJSON(w, struct {
			Messages []Message `json:"messages"`
		}{msgs})
	}
	// Otherwise the client hung up, and took nothing: nobody to answer.
}

func (s *server) delete(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	defer s.svc.release(q)
	receiptDone(w, q.delete(r.PathValue("receipt")))
}

func (s *server) changeVisibility(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	defer s.svc.release(q)
	if r.URL.Query().Get("timeout") == "" {
		http.Error(w, "timeout is required", http.StatusBadRequest)
		return
	}
	d, ok := duration(w, r, "timeout", 0, maxVisibility)
	if !ok {
		return
	}
	receiptDone(w, q.changeVisibility(r.PathValue("receipt"), d))
}

// receiptDone answers a delete or a change of visibility: 204, or 410 for
// a receipt that no longer holds a message (SQS answers 400; 410 says
// what happened: the receipt was good once).
func receiptDone(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrReceipt) {
		http.Error(w, err.Error(), http.StatusGone)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) stats(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	defer s.svc.release(q)
	v, f, d := q.counts()
	writeJSON(w, map[string]int{"visible": v, "in_flight": f, "delayed": d})
}

// unavailable answers 503: try again in a second, here or elsewhere.
func unavailable(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, why, http.StatusServiceUnavailable)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// serve serves s on ln until ctx ends, then stops in the order that leaves
// no receive hanging: the service's shutdown answers every parked receive
// (with no messages) first, so that the HTTP server's Shutdown, which
// waits for running handlers, finds them finishing. The other way round
// it would wait for the receives' waits.
func serve(ctx context.Context, ln net.Listener, s *server) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      maxWait + 10*time.Second, // must outlast the longest wait
		IdleTimeout:       time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return errors.Join(err, s.svc.shutdown(context.Background()))
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := errors.Join(s.svc.shutdown(sctx), hs.Shutdown(sctx))
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "address to listen on")
	var c config
	flag.IntVar(&c.maxPending, "max-pending", 100_000, "receives parked at once before 503 (0: no bound)")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s, err := newServer(c)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on http://%s; Ctrl-C answers the parked receives and stops", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = serve(ctx, ln, s)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}
