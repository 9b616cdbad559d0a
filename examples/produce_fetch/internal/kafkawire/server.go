package kafkawire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/groups"
	"github.com/purgatory-go/purgatory/operation"
)

type tpKey = operation.TopicPartitionKey

// Broker is what the server serves. Produce, Fetch and DeleteRecords
// answer through answer, at once or once the request completes in the
// broker's purgatories; answer may be called on another goroutine, and
// must be called exactly once (a Produce with acks 0 is answered into the
// void).
type Broker interface {
	Produce(req *kmsg.ProduceRequest, answer func(kmsg.Response))
	Fetch(req *kmsg.FetchRequest, answer func(kmsg.Response))
	DeleteRecords(req *kmsg.DeleteRecordsRequest, answer func(kmsg.Response))
	// Topics lists the topics, in order.
	Topics() []string
	// TopicPartitions describes topic's partitions, in order; nil if there
	// is no such topic.
	TopicPartitions(topic string) []PartitionState
	// Partition describes tp; false if there is no such partition.
	Partition(tp tpKey) (PartitionState, bool)
	// OffsetForTimestamp is the first offset of the first batch with a
	// timestamp at or after ts, and that timestamp; -1, -1 if none.
	OffsetForTimestamp(tp tpKey, ts int64) (offset, timestamp int64)
	// Groups is the group coordinator.
	Groups() *groups.Coordinator
}

// PartitionState is what Metadata and ListOffsets tell of a partition.
type PartitionState struct {
	Partition     int32
	Leader        bool  // false once leadership moved away
	LogStart      int64 // the earliest offset a consumer may read from
	HighWatermark int64 // the latest offset a consumer may read from
	// Replicas and ISR are follower ids (1..n): every follower, and the
	// in-sync ones. The leader, broker 0, is added to both.
	Replicas, ISR []int32
}

// apis are the requests served and the versions of each. A client picks
// the highest version both sides know, so only versions whose every field
// this package (or the Broker, for Produce and Fetch) handles are listed.
var apis = []kmsg.ApiVersionsResponseApiKey{
	// Produce from v0, though v0-2 carry the old message sets: librdkafka
	// before 2.11.1 compresses with gzip, snappy or lz4 only if Produce v0
	// is advertised (see partlog.UpConvertMessageSet).
	{ApiKey: 0, MinVersion: 0, MaxVersion: 11},
	{ApiKey: 1, MinVersion: 4, MaxVersion: 12}, // Fetch: v4 adds isolation levels; v13 names topics by ID
	{ApiKey: 2, MinVersion: 1, MaxVersion: 6},  // ListOffsets: v7 adds max-timestamp lookups
	{ApiKey: 3, MinVersion: 1, MaxVersion: 9},  // Metadata: v10 adds topic IDs
	// The group coordinator (internal/groups), from v0 as librdkafka's
	// feature check wants for its balanced consumer; the newest versions
	// are those of KIP-848's protocol, or name topics by ID.
	{ApiKey: 8, MinVersion: 0, MaxVersion: 8},  // OffsetCommit: v9 is KIP-848's, v10 names topics by ID
	{ApiKey: 9, MinVersion: 0, MaxVersion: 8},  // OffsetFetch: v8 batches groups; v9 adds KIP-848's member epoch
	{ApiKey: 10, MinVersion: 0, MaxVersion: 4}, // FindCoordinator: v4 batches keys; v6 adds share groups
	{ApiKey: 11, MinVersion: 0, MaxVersion: 9}, // JoinGroup
	{ApiKey: 12, MinVersion: 0, MaxVersion: 4}, // Heartbeat
	{ApiKey: 13, MinVersion: 0, MaxVersion: 5}, // LeaveGroup: v3 batches members
	{ApiKey: 14, MinVersion: 0, MaxVersion: 5}, // SyncGroup
	{ApiKey: 15, MinVersion: 0, MaxVersion: 6}, // DescribeGroups
	{ApiKey: 16, MinVersion: 0, MaxVersion: 5}, // ListGroups
	{ApiKey: 18, MinVersion: 0, MaxVersion: 3}, // ApiVersions
	{ApiKey: 21, MinVersion: 0, MaxVersion: 2}, // DeleteRecords: parked until every replica has deleted
	{ApiKey: 22, MinVersion: 0, MaxVersion: 4}, // InitProducerId: idempotent producers (franz-go's default)
}

// APIs returns the requests served, with their versions, as ApiVersions
// lists them.
func APIs() []kmsg.ApiVersionsResponseApiKey { return slices.Clone(apis) }

func supportedVersion(key, version int16) bool {
	for _, a := range apis {
		if a.ApiKey == key {
			return version >= a.MinVersion && version <= a.MaxVersion
		}
	}
	return false
}

// Config configures the server. Zero fields take the default
// in brackets, Kafka's own where it has one.
type Config struct {
	// MaxRequestBytes is the largest request accepted; a client announcing
	// a larger one is disconnected [100 MiB, socket.request.max.bytes].
	MaxRequestBytes int
	// IdleTimeout closes a connection that sends no request for this
	// long; answers it is still owed are written first
	// [10m, connections.max.idle.ms].
	IdleTimeout time.Duration
	// ReadTimeout bounds the reading of one request once its size has
	// arrived, and WriteTimeout the writing of one response [30s each].
	ReadTimeout, WriteTimeout time.Duration
	// MaxInflight is how many requests of one connection may be read and
	// not yet answered; past it, the connection is not read until the
	// oldest is answered [100].
	MaxInflight int
	// Advertise is the host:port that Metadata gives clients; empty: the
	// listener's address.
	Advertise string
	// Logger receives connection errors; nil discards them.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 100 << 20
	}
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&c.IdleTimeout, 10 * time.Minute}, {&c.ReadTimeout, 30 * time.Second}, {&c.WriteTimeout, 30 * time.Second}} {
		if *d.p <= 0 {
			*d.p = d.v
		}
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 100
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server serves a Broker to Kafka clients. Create it with NewServer, run
// Serve, and stop it with Quiesce, then the broker's Close, then Wait (the
// broker's ServeAll does that).
type Server struct {
	b   Broker
	cfg Config

	mu        sync.Mutex
	ln        net.Listener
	conns     map[*kconn]struct{}
	quiescing bool // guarded by mu; also read by readers through isQuiescing

	wg         sync.WaitGroup // the accept loop and every connection's two goroutines
	producerID atomic.Int64

	// Counters for the status line and tests.
	open, accepted, requests, rejected atomic.Int64
}

// Stats counts connections and requests.
type Stats struct {
	Open, Accepted int64 // connections
	Requests       int64 // requests read and answered or being answered
	Rejected       int64 // connections closed for a bad frame or request
}

// NewServer returns a server for b.
func NewServer(b Broker, cfg Config) *Server {
	cfg.setDefaults()
	s := &Server{b: b, cfg: cfg, conns: make(map[*kconn]struct{})}
	s.producerID.Store(1000)
	return s
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{Open: s.open.Load(), Accepted: s.accepted.Load(), Requests: s.requests.Load(), Rejected: s.rejected.Load()}
}

// Serve accepts connections on ln until Quiesce. It returns nil after
// Quiesce, or the error that stopped it.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.quiescing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isQuiescing() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.mu.Lock()
		if s.quiescing {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		c := &kconn{s: s, nc: nc, queue: make(chan *inflight, s.cfg.MaxInflight),
			writerDone: make(chan struct{}), kill: make(chan struct{})}
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		s.open.Add(1)
		s.accepted.Add(1)
		go c.read()
		go c.write()
	}
}

func (s *Server) isQuiescing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quiescing
}

// Quiesce stops accepting connections and reading requests. Requests
// already read are still answered: close the broker next, which answers
// the parked ones, then Wait for the answers to be written.
func (s *Server) Quiesce() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.quiescing {
		return
	}
	s.quiescing = true
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		// A reader sets its own deadline before each read and then
		// checks quiescing, so whichever of the two runs last, it stops.
		_ = c.nc.SetReadDeadline(time.Now())
	}
}

// Wait waits until every connection has written its answers and closed.
// If ctx ends first, it closes the connections that are left, waits for
// their goroutines, and returns ctx.Err().
func (s *Server) Wait(ctx context.Context) error {
	s.Quiesce()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		c.closeNow()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// kconn is one client connection. Its reader reads and dispatches requests
// in order; its writer writes their answers in the same order (Kafka
// promises that), each once it is ready: a parked fetch holds back the
// answers behind it, as in Kafka.
type kconn struct {
	s          *Server
	nc         net.Conn
	queue      chan *inflight // reader to writer, in request order
	writerDone chan struct{}  // closed when the writer returns
	kill       chan struct{}  // closed by closeNow
	killOnce   sync.Once
}

// inflight is a request whose answer the writer waits for.
type inflight struct {
	corr  int32
	key   int16
	ready chan struct{} // closed once resp is set
	resp  kmsg.Response
}

func (in *inflight) answer(resp kmsg.Response) {
	in.resp = resp
	close(in.ready)
}

func (c *kconn) closeNow() {
	c.killOnce.Do(func() {
		close(c.kill)
		c.nc.Close()
	})
}

func (c *kconn) logf(level slog.Level, format string, args ...any) {
	c.s.cfg.Logger.Log(context.Background(), level, fmt.Sprintf(format, args...), "client", c.nc.RemoteAddr().String())
}

// read is the connection's reader goroutine. When it returns, the writer
// answers what was read and closes the connection.
func (c *kconn) read() {
	defer c.s.wg.Done()
	defer close(c.queue)
	for {
		frame, err := c.readFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !c.s.isQuiescing() {
				c.logf(slog.LevelInfo, "closing connection: %v", err)
			}
			return
		}
		if err := c.handle(frame); err != nil {
			c.s.rejected.Add(1)
			c.logf(slog.LevelInfo, "closing connection: %v", err)
			return
		}
	}
}

// readFrame reads one size-prefixed request. A size over the limit closes
// the connection before anything else is read, as Kafka does; the body is
// read as it arrives rather than allocated whole up front, so a client
// announcing a large frame and sending nothing costs nothing.
func (c *kconn) readFrame() ([]byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.IdleTimeout))
	if c.s.isQuiescing() {
		return nil, net.ErrClosed
	}
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 8 || int(n) > c.s.cfg.MaxRequestBytes {
		c.s.rejected.Add(1)
		return nil, fmt.Errorf("request size %d is outside [8, %d]", n, c.s.cfg.MaxRequestBytes)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.ReadTimeout))
	if c.s.isQuiescing() {
		return nil, net.ErrClosed
	}
	var buf bytes.Buffer
	buf.Grow(min(int(n), 64<<10))
	if _, err := io.CopyN(&buf, c.nc, int64(n)); err != nil {
		return nil, fmt.Errorf("reading a %d-byte request: %w", n, err)
	}
	return buf.Bytes(), nil
}

// handle parses one request and dispatches it. An error closes the
// connection: that is Kafka's answer to a request it cannot parse or does
// not support, except ApiVersions, which always gets an answer.
func (c *kconn) handle(frame []byte) (err error) {
	defer func() {
		// A request that trips a bug here costs its connection, not the
		// server.
		if r := recover(); r != nil {
			err = fmt.Errorf("panic handling a request: %v", r)
		}
	}()
	r := kbin.Reader{Src: frame}
	key, version, corr := r.Int16(), r.Int16(), r.Int32()
	if key == 18 && !supportedVersion(key, version) {
		// A client sends its newest ApiVersions first; Kafka answers a
		// version it does not know in v0, with UNSUPPORTED_VERSION and the
		// versions it has, and the client retries with one of those.
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.SetVersion(0)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		resp.ApiKeys = apis
		return c.enqueue(&inflight{corr: corr, key: key, ready: closedChan, resp: resp})
	}
	if !supportedVersion(key, version) {
		return fmt.Errorf("unsupported request: key %d (%s) version %d", key, kmsg.NameForKey(key), version)
	}
	var rc reqContext
	if id := r.NullableString(); id != nil {
		rc.clientID = *id
	}
	if host, _, err := net.SplitHostPort(c.nc.RemoteAddr().String()); err == nil {
		rc.host = "/" + host // as Kafka shows a member's host
	}
	kreq := kmsg.RequestForKey(key)
	kreq.SetVersion(version)
	if kreq.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if !r.Ok() {
		return fmt.Errorf("truncated request header (key %d version %d)", key, version)
	}
	if err := kreq.ReadFrom(r.Src); err != nil {
		return fmt.Errorf("malformed %s v%d request: %w", kmsg.NameForKey(key), version, err)
	}
	c.s.requests.Add(1)
	if p, ok := kreq.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
		// acks=0: the client expects no answer at all.
		c.s.b.Produce(p, func(kmsg.Response) {})
		return nil
	}
	in := &inflight{corr: corr, key: key, ready: make(chan struct{})}
	// Queue first, so the answer keeps its place even if it is ready
	// before the request is dispatched.
	if err := c.enqueue(in); err != nil {
		return err
	}
	c.s.dispatch(kreq, rc, in.answer)
	return nil
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *kconn) enqueue(in *inflight) error {
	select {
	case c.queue <- in:
		return nil
	case <-c.writerDone:
		return net.ErrClosed
	}
}

// write is the connection's writer goroutine: it writes each answer in
// request order as soon as it is ready, and closes the connection once the
// reader has stopped and every answer is written, or a write fails.
func (c *kconn) write() {
	defer c.s.wg.Done()
	defer func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
		c.s.open.Add(-1)
	}()
	defer c.closeNow()
	defer close(c.writerDone)
	var buf []byte
	for in := range c.queue {
		select {
		case <-in.ready:
		case <-c.kill:
			return
		}
		buf = appendResponse(buf[:0], in)
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		if _, err := c.nc.Write(buf); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				c.logf(slog.LevelInfo, "closing connection: %v", err)
			}
			return
		}
	}
}

// appendResponse frames a response: its size, the correlation ID, the
// header's tagged fields if the response is flexible (ApiVersions'
// header never is, so that any client can read it), then the body.
func appendResponse(dst []byte, in *inflight) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = kbin.AppendInt32(dst, in.corr)
	if in.resp.IsFlexible() && in.key != 18 {
		dst = append(dst, 0)
	}
	dst = in.resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[0:4], uint32(len(dst)-4))
	return dst
}

// dispatch answers a request through answer, at once or, for Produce with
// acks=all, Fetch, DeleteRecords, JoinGroup and SyncGroup, once a
// purgatory completes it.
func (s *Server) dispatch(kreq kmsg.Request, rc reqContext, answer func(kmsg.Response)) {
	switch req := kreq.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = apis
		answer(resp)
	case *kmsg.MetadataRequest:
		answer(s.metadata(req))
	case *kmsg.InitProducerIDRequest:
		answer(s.initProducerID(req))
	case *kmsg.ListOffsetsRequest:
		answer(s.listOffsets(req))
	case *kmsg.ProduceRequest:
		s.b.Produce(req, answer)
	case *kmsg.FetchRequest:
		s.b.Fetch(req, answer)
	case *kmsg.DeleteRecordsRequest:
		s.b.DeleteRecords(req, answer)
	case *kmsg.FindCoordinatorRequest:
		answer(s.findCoordinator(req))
	case *kmsg.JoinGroupRequest:
		s.joinGroup(req, rc, answer)
	case *kmsg.SyncGroupRequest:
		s.syncGroup(req, answer)
	case *kmsg.HeartbeatRequest:
		answer(s.heartbeat(req))
	case *kmsg.LeaveGroupRequest:
		answer(s.leaveGroup(req))
	case *kmsg.OffsetCommitRequest:
		answer(s.offsetCommit(req))
	case *kmsg.OffsetFetchRequest:
		answer(s.offsetFetch(req))
	case *kmsg.ListGroupsRequest:
		answer(s.listGroups(req))
	case *kmsg.DescribeGroupsRequest:
		answer(s.describeGroups(req))
	default: // not reached: handle admits only the keys in apis
		panic(fmt.Sprintf("no handler for %s", kmsg.NameForKey(kreq.Key())))
	}
}

// listOffsets answers where a consumer may start: the earliest offset (the
// log start offset, which DeleteRecords moves), the latest a consumer can
// read (the high watermark), or the first batch at or after a timestamp.
func (s *Server) listOffsets(req *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.Offset, rp.Timestamp = -1, -1
			tp := tpKey{Topic: t.Topic, Partition: p.Partition}
			part, ok := s.b.Partition(tp)
			switch {
			case !ok:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case !part.Leader:
				rp.ErrorCode = kerr.NotLeaderForPartition.Code
			case p.Timestamp == -1: // latest
				rp.Offset = part.HighWatermark
			case p.Timestamp == -2: // earliest: the log start offset
				rp.Offset = part.LogStart
			case p.Timestamp >= 0:
				rp.Offset, rp.Timestamp = s.b.OffsetForTimestamp(tp, p.Timestamp)
			default:
				rp.ErrorCode = kerr.InvalidRequest.Code
			}
			rp.LeaderEpoch = 0
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// metadata describes this broker, the only one, as the leader of every
// partition. Its followers are in-process goroutines, not brokers, but
// they are listed as replicas 1..n, and the in-sync ones in the ISR, so that
// a client (kcat -L) shows the ISR shrink and grow.
func (s *Server) metadata(req *kmsg.MetadataRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	host, port := s.advertised()
	br := kmsg.NewMetadataResponseBroker()
	br.NodeID, br.Host, br.Port = 0, host, port
	resp.Brokers = []kmsg.MetadataResponseBroker{br}
	cluster := "purgatory-go-example"
	resp.ClusterID = &cluster
	resp.ControllerID = 0
	var names []string
	if req.Topics == nil { // null: every topic
		names = s.b.Topics()
	}
	for _, t := range req.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	for _, name := range names {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = kmsg.StringPtr(name)
		parts := s.b.TopicPartitions(name)
		if parts == nil {
			mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		}
		for _, st := range parts {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition = st.Partition
			mp.Leader, mp.LeaderEpoch = 0, 0
			if !st.Leader {
				mp.Leader = -1
				mp.ErrorCode = kerr.LeaderNotAvailable.Code
			}
			mp.Replicas = append([]int32{0}, st.Replicas...)
			mp.ISR = append([]int32{0}, st.ISR...)
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

func (s *Server) advertised() (string, int32) {
	addr := s.cfg.Advertise
	if addr == "" {
		s.mu.Lock()
		if s.ln != nil {
			addr = s.ln.Addr().String()
		}
		s.mu.Unlock()
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 9092
	}
	n, _ := strconv.Atoi(port)
	return host, int32(n)
}

// initProducerID hands out producer IDs for idempotent producers. Their
// sequence numbers are stored with the batches but not checked: a retried
// batch is written twice. Transactions are not supported.
func (s *Server) initProducerID(req *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	switch {
	case req.TransactionalID != nil:
		resp.ErrorCode = kerr.InvalidRequest.Code // no transaction coordinator here
	case req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < 32766:
		// A producer bumping its epoch (v3+) keeps its ID.
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
	default:
		resp.ProducerID, resp.ProducerEpoch = s.producerID.Add(1), 0
	}
	return resp
}
