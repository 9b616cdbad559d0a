package main

import (
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	purgatoryprom "github.com/purgatory-go/purgatory/contrib/prometheus"
	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
)

const (
	maxBodyBytes = 1 << 20
	maxTimeoutMs = 30_000 // the largest timeout_ms and max_wait_ms accepted
)

// HTTPConfig configures the HTTP front end.
type HTTPConfig struct {
	// ProduceTimeout is a produce's timeout when its body has no
	// timeout_ms; MaxWait a fetch's when it has no max_wait_ms.
	ProduceTimeout, MaxWait time.Duration
	// The server's timeouts; zero takes the default in brackets.
	ReadHeaderTimeout time.Duration // a request's headers [5s]
	ReadTimeout       time.Duration // a whole request, body included [10s]
	IdleTimeout       time.Duration // a keep-alive connection between requests [60s]
	// WriteTimeout bounds the time from the end of a request's headers to
	// the end of its answer, so it must outlast the longest long poll
	// [maxTimeoutMs + 10s].
	WriteTimeout time.Duration
}

func (c *HTTPConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ProduceTimeout, 500*time.Millisecond)
	def(&c.MaxWait, 500*time.Millisecond)
	def(&c.ReadHeaderTimeout, 5*time.Second)
	def(&c.ReadTimeout, 10*time.Second)
	def(&c.IdleTimeout, 60*time.Second)
	def(&c.WriteTimeout, maxTimeoutMs*time.Millisecond+10*time.Second)
}

// Server serves a Broker over HTTP:
//
//	POST /produce    {"partitions":[{"topic":"t","partition":0,"records":["a"]}],"acks":-1,"timeout_ms":500}
//	GET  /fetch      ?topic=t&partition=0&offset=0&min_bytes=1&max_wait_ms=500  (a long poll)
//	GET  /debug/vars the expvar variables, with the purgatories' Stats
//
// Every error, an unknown path or a wrong method included, is answered with
// a JSON body {"error": "..."}.
type Server struct {
	b   *Broker
	cfg HTTPConfig
	mux *http.ServeMux
}

// NewServer returns the handler for b.
func NewServer(b *Broker, cfg HTTPConfig) *Server {
	cfg.setDefaults()
	s := &Server{b: b, cfg: cfg, mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /produce", s.produce)
	s.mux.HandleFunc("GET /fetch", s.fetch)
	s.mux.HandleFunc("GET /debug/vars", s.vars)
	s.mux.Handle("GET /metrics", metricsHandler(b))
	// The patterns without a method match what the ones above do not, so
	// a wrong method gets a JSON 405 instead of the mux's plain text.
	for path, allow := range map[string]string{"/produce": "POST", "/fetch": "GET, HEAD", "/debug/vars": "GET, HEAD", "/metrics": "GET, HEAD"} {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: allowed methods are %s", r.Method, path, allow))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such path: "+r.URL.Path)
	})
	return s
}

// NewHTTPServer returns an http.Server for b at addr, with its timeouts set:
// a client that sends its request slowly, or holds an idle connection, is
// disconnected.
func NewHTTPServer(addr string, b *Broker, cfg HTTPConfig) *http.Server {
	cfg.setDefaults()
	return &http.Server{
		Addr:              addr,
		Handler:           NewServer(b, cfg),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

type produceBody struct {
	Partitions []struct {
		Topic     string   `json:"topic"`
		Partition int32    `json:"partition"`
		Records   []string `json:"records"`
	} `json:"partitions"`
	Acks      *int   `json:"acks"`
	TimeoutMs *int64 `json:"timeout_ms"`
}

// produceJSON is the answer to POST /produce.
type produceJSON struct {
	Partitions map[string]producePartitionJSON `json:"partitions"`
}

type producePartitionJSON struct {
	Error      string `json:"error"`
	Message    string `json:"message,omitempty"`
	BaseOffset int64  `json:"base_offset"` // offset of the first record; -1 on error
	Offset     int64  `json:"offset"`      // offset after the last record; -1 on error
}

func (s *Server) produce(w http.ResponseWriter, r *http.Request) {
	var body produceBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(&body)
	if err == nil {
		// One JSON value and nothing after it but spaces.
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the JSON body")
			if terr != nil && !errors.Is(terr, io.ErrUnexpectedEOF) {
				err = terr
			}
		}
	}
	if err != nil {
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
	timeout := s.cfg.ProduceTimeout
	switch {
	case len(body.Partitions) == 0:
		writeError(w, http.StatusBadRequest, "no partitions")
		return
	case acks != -1 && acks != 0 && acks != 1:
		writeError(w, http.StatusBadRequest, "acks must be -1, 0 or 1")
		return
	case body.TimeoutMs != nil:
		// Checked in milliseconds, before converting: a large value would
		// overflow time.Duration and wrap into range.
		if *body.TimeoutMs <= 0 || *body.TimeoutMs > maxTimeoutMs {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout_ms must be in (0, %d]", maxTimeoutMs))
			return
		}
		timeout = time.Duration(*body.TimeoutMs) * time.Millisecond
	}
	// Records for one partition, in the order given, go into one batch.
	var order []tpKey
	values := map[tpKey][][]byte{}
	for _, p := range body.Partitions {
		tp := tpKey{Topic: p.Topic, Partition: p.Partition}
		if s.b.partitions[tp] == nil {
			writeError(w, http.StatusNotFound, "unknown partition "+tp.String())
			return
		}
		if len(p.Records) == 0 {
			writeError(w, http.StatusBadRequest, "no records for partition "+tp.String())
			return
		}
		if _, ok := values[tp]; !ok {
			order = append(order, tp)
		}
		for _, rec := range p.Records {
			values[tp] = append(values[tp], []byte(rec))
		}
	}
	req := ProduceRequest{Acks: acks, Timeout: timeout}
	now := time.Now()
	for _, tp := range order {
		req.Partitions = append(req.Partitions, ProducePartition{TP: tp, Batch: partlog.EncodeBatch(values[tp], now)})
	}
	// The request is answered even if the client goes away: its records are
	// in the log, and the purgatory completes it in time either way.
	resp := <-s.b.Produce(req)
	out := produceJSON{Partitions: make(map[string]producePartitionJSON, len(resp.Partitions))}
	for _, p := range resp.Partitions {
		out.Partitions[p.TP.String()] = producePartitionJSON{Error: errName(p.Err), Message: p.Message,
			BaseOffset: p.BaseOffset, Offset: p.Offset}
	}
	writeJSON(w, http.StatusOK, out)
}

// fetchJSON is the answer to GET /fetch.
type fetchJSON struct {
	Partitions map[string]fetchPartitionJSON `json:"partitions"`
}

type fetchPartitionJSON struct {
	Error         string   `json:"error"`
	HighWatermark int64    `json:"high_watermark"`
	Records       []string `json:"records"` // [] when there are none
	NextOffset    int64    `json:"next_offset"`
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
	waitMs, err := intParam(q.Get("max_wait_ms"), s.cfg.MaxWait.Milliseconds())
	if err != nil || waitMs < 0 || waitMs > maxTimeoutMs { // in ms: no overflow
		writeError(w, http.StatusBadRequest, fmt.Sprintf("max_wait_ms must be in [0, %d]", maxTimeoutMs))
		return
	}
	ch, op := s.b.Fetch(FetchRequest{Partitions: []FetchPartitionRequest{{TP: tp, Offset: offset}},
		MinBytes: minBytes, MaxWait: time.Duration(waitMs) * time.Millisecond, Committed: true})
	var resp FetchResponse
	select {
	case resp = <-ch:
	case <-r.Context().Done():
		// The client went away: complete the fetch now rather than leave it
		// parked until max_wait. The answer goes nowhere.
		op.ForceComplete()
		return
	}
	out := fetchJSON{Partitions: make(map[string]fetchPartitionJSON, len(resp.Partitions))}
	for _, p := range resp.Partitions {
		j := fetchPartitionJSON{Error: errName(p.Err), HighWatermark: p.HighWatermark, Records: []string{}, NextOffset: p.Offset}
		values, next, err := partlog.DecodeValues(p.Batches, p.Offset)
		if err != nil {
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("%v: stored batch: %v", p.TP, err))
			return
		}
		for _, v := range values {
			j.Records = append(j.Records, string(v))
		}
		j.NextOffset = next
		out.Partitions[p.TP.String()] = j
	}
	writeJSON(w, http.StatusOK, out)
}

// vars serves the expvar variables plus the purgatories' Stats. They are
// written here rather than published with expvar.Publish, which is global
// and allows one broker per process.
func (s *Server) vars(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	vars := map[string]json.RawMessage{}
	expvar.Do(func(kv expvar.KeyValue) { vars[kv.Key] = json.RawMessage(kv.Value.String()) })
	st := s.b.Stats()
	stats, _ := json.Marshal(map[string]any{"produce": st.Produce, "fetch": st.Fetch,
		"isr_shrinks": st.ISRShrinks, "isr_expands": st.ISRExpands})
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

// metricsHandler serves the ReplicaManager's purgatories' Stats to Prometheus, under
// Kafka's metric names (contrib/prometheus), with the Go runtime's own
// metrics beside them.
func metricsHandler(b *Broker) http.Handler {
	c := purgatoryprom.NewCollector()
	_ = c.Add("Produce", b.produce, purgatoryprom.WithTimes(b.produceTimes)) // the names are fixed and distinct
	_ = c.Add("Fetch", b.fetch, purgatoryprom.WithTimes(b.fetchTimes))
	_ = c.Add("DeleteRecords", b.deleteRecords)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector())
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
