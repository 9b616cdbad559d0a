package main

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

const (
	maxBodyBytes   = 1 << 20
	maxTimeout     = 30 * time.Second
	defaultMaxWait = 500 * time.Millisecond
)

// Server serves a Broker over HTTP:
//
//	POST /produce    {"partitions":[{"topic":"t","partition":0,"records":["a"]}],"acks":-1,"timeout_ms":500}
//	GET  /fetch      ?topic=t&partition=0&offset=0&min_bytes=1&max_wait_ms=500  (a long poll)
//	GET  /debug/vars the expvar variables, with the purgatories' Stats
type Server struct {
	b   *Broker
	mux *http.ServeMux
}

// NewServer returns the handler for b.
func NewServer(b *Broker) *Server {
	s := &Server{b: b, mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /produce", s.produce)
	s.mux.HandleFunc("GET /fetch", s.fetch)
	s.mux.HandleFunc("GET /debug/vars", s.vars)
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

type produceBody struct {
	Partitions []struct {
		Topic     string   `json:"topic"`
		Partition int32    `json:"partition"`
		Records   []string `json:"records"`
	} `json:"partitions"`
	Acks      *int  `json:"acks"`
	TimeoutMs int64 `json:"timeout_ms"`
}

func (s *Server) produce(w http.ResponseWriter, r *http.Request) {
	var body produceBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", maxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return
	}
	acks := -1
	if body.Acks != nil {
		acks = *body.Acks
	}
	timeout := time.Duration(body.TimeoutMs) * time.Millisecond
	switch {
	case len(body.Partitions) == 0:
		writeError(w, http.StatusBadRequest, "no partitions")
		return
	case acks != -1 && acks != 0 && acks != 1:
		writeError(w, http.StatusBadRequest, "acks must be -1, 0 or 1")
		return
	case body.TimeoutMs <= 0 || timeout > maxTimeout:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout_ms must be in (0, %d]", maxTimeout.Milliseconds()))
		return
	}
	req := ProduceRequest{Records: make(map[tpKey][][]byte), Acks: acks, Timeout: timeout}
	for _, p := range body.Partitions {
		tp := tpKey{Topic: p.Topic, Partition: p.Partition}
		if s.b.partitions[tp] == nil {
			writeError(w, http.StatusNotFound, "unknown partition "+tp.String())
			return
		}
		for _, rec := range p.Records {
			req.Records[tp] = append(req.Records[tp], []byte(rec))
		}
	}
	// The request is answered even if the client goes away: its records are
	// in the log, and the purgatory completes it in time either way.
	resp := <-s.b.Produce(req)
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) fetch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tp := tpKey{Topic: q.Get("topic")}
	part, err := strconv.ParseInt(q.Get("partition"), 10, 32)
	if err != nil || tp.Topic == "" {
		writeError(w, http.StatusBadRequest, "topic and partition are required")
		return
	}
	tp.Partition = int32(part)
	if s.b.partitions[tp] == nil {
		writeError(w, http.StatusNotFound, "unknown partition "+tp.String())
		return
	}
	offset, err := intParam(q.Get("offset"), 0)
	if err != nil || offset < 0 {
		writeError(w, http.StatusBadRequest, "offset must be a non-negative integer")
		return
	}
	minBytes, err := intParam(q.Get("min_bytes"), 1)
	if err != nil || minBytes < 0 {
		writeError(w, http.StatusBadRequest, "min_bytes must be a non-negative integer")
		return
	}
	waitMs, err := intParam(q.Get("max_wait_ms"), defaultMaxWait.Milliseconds())
	if err != nil || waitMs < 0 || time.Duration(waitMs)*time.Millisecond > maxTimeout {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("max_wait_ms must be in [0, %d]", maxTimeout.Milliseconds()))
		return
	}
	ch, op := s.b.Fetch(FetchRequest{Offsets: map[tpKey]int64{tp: offset}, MinBytes: minBytes,
		MaxWait: time.Duration(waitMs) * time.Millisecond, Committed: true})
	select {
	case resp := <-ch:
		writeJSON(w, http.StatusOK, resp)
	case <-r.Context().Done():
		// The client went away: complete the fetch now rather than leave it
		// parked until max_wait. The answer goes nowhere.
		op.ForceComplete()
	}
}

// vars serves the expvar variables plus the purgatories' Stats. They are
// written here rather than published with expvar.Publish, which is global
// and allows one broker per process.
func (s *Server) vars(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	vars := map[string]json.RawMessage{}
	expvar.Do(func(kv expvar.KeyValue) { vars[kv.Key] = json.RawMessage(kv.Value.String()) })
	ps, fs := s.b.Stats()
	stats, _ := json.Marshal(map[string]any{"produce": ps, "fetch": fs})
	vars["purgatory"] = stats
	_ = json.NewEncoder(w).Encode(vars)
}

func intParam(v string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// Serve runs srv on addr until ctx ends, then shuts down cleanly: first the
// broker, whose purgatories answer every parked request (their timeouts
// fire early), then the HTTP server, which waits for those answers to be
// written.
func Serve(ctx context.Context, b *Broker, srv *http.Server, ready func(addr string)) error {
	ln, err := listen(srv.Addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	berr := b.Close(shutdown)
	serr := srv.Shutdown(shutdown)
	<-errc
	return errors.Join(berr, serr)
}
