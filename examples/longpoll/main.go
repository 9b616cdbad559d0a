// Command longpoll is a long-poll HTTP server on a purgatory. Clients wait
// for a key to change; a notify answers every client waiting on its key.
//
//	GET  /wait?key=K&after=V&timeout=D  200 {"key","version","value"} once K's version exceeds V,
//	                                    204 at the timeout, 503 + Retry-After when full, stopping
//	                                    or without its store
//	POST /notify?key=K                  stores the body as K's value: 200 {"version","woken"}
//	GET  /metrics                       the purgatory's figures for Prometheus
//
// A key or value that is not UTF-8 is answered in base64, as key_base64 or
// value_base64. Alone, it keeps keys in memory; with -redis, it is one of several servers
// sharing them through Redis (store.go, redis.go, cluster.go). request.go
// holds the limits on what a client may send. bench_test.go compares it
// with the usual Go long poll: a channel per key and a time.After per
// request.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	purgatoryprom "github.com/purgatory-go/purgatory/contrib/prometheus"
	"github.com/purgatory-go/purgatory/contrib/timing"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
)

// poll is one GET /wait. TryComplete runs with the poll's lock held, as
// often as notifies on its key come; it reads the key's newest entry
// without a lock. OnComplete runs once, on whichever goroutine completed the
// poll (a notify's, the reaper's at the timeout, Shutdown's, the handler's
// when its client hangs up), so it only wakes the handler, which writes the
// answer, and never blocks.
type poll struct {
	operation.Base
	key    *watchedKey
	after  uint64
	answer atomic.Pointer[entry] // the entry TryComplete found past after
	done   chan struct{}         // closed by OnComplete; Cause then says why
}

// TryComplete keeps the entry it completes the poll with: the key's newest
// may change again before the handler writes the answer, and after a Redis
// that lost its data, to one that is not past after.
func (p *poll) TryComplete() bool {
	if e := p.key.newest.Load(); e.Version > p.after {
		p.answer.Store(e)
		return p.ForceComplete()
	}
	return false
}

func (p *poll) OnComplete()   { close(p.done) }
func (p *poll) OnExpiration() {}

type server struct {
	store   store        // where keys' entries live, and how their changes are heard
	keys    keys         // the keys parked polls wait on
	listen  atomic.Bool  // the store's announcements are heard: new polls may park
	state   int8         // 1 after an up, -1 after a lost, 0 before either; the listener's calls only
	reading sync.RWMutex // read-held by a handler reading the store into a key's record; held by up
	stop    func()       // stops listening to the store
	polls   *purgatory.Purgatory[string, *poll]
	times   *timing.Recorder // time in purgatory by outcome, for /metrics; nil without -timing
	body    time.Duration    // how long a request body may take to arrive
	log     *log.Logger
	mux     http.ServeMux
}

// config is what main's flags set.
type config struct {
	maxPending  int           // polls parked at once before 503; zero means no bound
	timing      bool          // keep time-in-purgatory histograms for /metrics
	store       store         // nil: a memStore, for one server alone
	bodyTimeout time.Duration // zero: defaultBodyTimeout
	log         *log.Logger   // nil: the log package's standard logger
}

// newServer returns a server listening to its store. close answers its
// parked polls with 503, and later ones the same way.
func newServer(c config) (*server, error) {
	s := &server{store: c.store, body: cmp.Or(c.bodyTimeout, defaultBodyTimeout), log: cmp.Or(c.log, log.Default())}
	if s.store == nil {
		s.store = new(memStore)
	}
	opts := []purgatory.Option{purgatory.WithMaxPending(c.maxPending)}
	var metricOpts []purgatoryprom.AddOption
	if c.timing {
		// The observer hears of every park and departure, and each
		// parked poll then holds 80 bytes more (README, "What the figures say").
		s.times = new(timing.Recorder)
		opts = append(opts, purgatory.WithObserver(s.times))
		metricOpts = append(metricOpts, purgatoryprom.WithTimes(s.times))
	}
	var err error
	if s.polls, err = purgatory.New[string, *poll]("LongPoll", opts...); err != nil {
		return nil, err
	}
	metrics := purgatoryprom.NewCollector()
	_ = metrics.Add("LongPoll", s.polls, metricOpts...) // one fixed, valid name
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, s.storeUp())
	s.mux.HandleFunc("GET /wait", s.wait)
	s.mux.HandleFunc("POST /notify", s.notify)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.stop = s.store.listen(s)
	return s, nil
}

// close expires every parked poll (503) and stops listening to the store.
func (s *server) close(ctx context.Context) error {
	err := s.polls.Shutdown(ctx)
	s.stop()
	return err
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		s.bodyDeadline(w)
	}
	s.mux.ServeHTTP(w, r)
}

func (s *server) wait(w http.ResponseWriter, r *http.Request) {
	key, ok := keyOf(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	after, aerr := strconv.ParseUint(cmp.Or(q.Get("after"), "0"), 10, 64)
	timeout, terr := time.ParseDuration(cmp.Or(q.Get("timeout"), defaultTimeout))
	switch {
	case aerr != nil:
		http.Error(w, "after must be a version: a non-negative integer", http.StatusBadRequest)
		return
	case terr != nil || timeout < 0 || timeout > maxTimeout:
		http.Error(w, "timeout must be a Go duration from 0s to "+maxTimeout.String(), http.StatusBadRequest)
		return
	}
	if !s.listen.Load() {
		s.unavailable(w)
		return
	}
	k := s.keys.hold(key)
	defer s.keys.release(k)
	if !k.filled.Load() && !s.fill(r.Context(), k) {
		s.unavailable(w)
		return
	}
	p := &poll{key: k, after: after, done: make(chan struct{})}
	p.Init(p, timeout)
	if _, err := s.polls.TryCompleteElseWatch(p, key); err != nil {
		// ErrFull (WithMaxPending) or ErrShutdown: nothing was parked.
		unavailable(w, err.Error())
		return
	}
	select {
	case <-p.done:
	case <-r.Context().Done():
		// The client hung up: take the poll out of the purgatory now, not
		// at its timeout. Complete waits for a TryComplete under way; if a
		// notify or the timeout completed the poll first, it does nothing.
		// Either way nobody is left to answer.
		s.polls.Complete(p, errHungUp)
		return
	}
	switch cause := p.Cause(); {
	case cause == nil:
		writeJSON(w, p.answer.Load().answer(key))
	case errors.Is(cause, operation.ErrExpired):
		w.WriteHeader(http.StatusNoContent)
	default: // purgatory.ErrShutdown
		// The server is stopping before the timeout the client asked for:
		// 503 tells it to retry, here or elsewhere, rather than 204's
		// "nothing changed", which would be a claim about a wait not made.
		unavailable(w, "server shutting down")
	}
}

func (s *server) notify(w http.ResponseWriter, r *http.Request) {
	key, ok := keyOf(w, r)
	if !ok {
		return
	}
	value, ok := s.readBody(w, r)
	if !ok {
		return
	}
	// Store first, check second. A poll being parked now either sees the
	// new version in the TryComplete that TryCompleteElseWatch makes after
	// watching the key, or is watched by the time CheckAndComplete looks:
	// the purgatory's lock story covers both. Checking before storing would
	// let a poll parked in between wait for the next notify or its timeout.
	// No lock of ours is held across the check: it runs TryCompletes, and
	// one that waited for a lock its caller holds would never return.
	s.reading.RLock()
	e, err := s.store.put(r.Context(), key, value)
	s.reading.RUnlock()
	if err != nil {
		// Not stored, now or later (store.put): retrying is safe.
		s.unavailable(w)
		return
	}
	// woken counts this server's polls; the store announces the change to
	// the others, which check theirs.
	writeJSON(w, map[string]any{"version": e.Version, "woken": s.heard(key, e)})
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	var c config
	flag.IntVar(&c.maxPending, "max-pending", 100_000, "polls parked at once before 503 (0: no bound)")
	flag.BoolVar(&c.timing, "timing", false, "time-in-purgatory histograms on /metrics (80 B more per parked poll)")
	flag.DurationVar(&c.bodyTimeout, "body-timeout", defaultBodyTimeout, "how long a request body may take to arrive before 408")
	newStore := storeFlags()
	flag.Parse()
	c.store = newStore()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s, err := newServer(c)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on http://%s, keys in %v; Ctrl-C answers the parked polls and stops", ln.Addr(), c.store)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = serve(ctx, ln, s)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}
