package main

import (
	"cmp"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// naiveServer is the same queue written the way Go services usually write
// one, without the library: per queue a mutex, a slice of waiting
// receives' channels that a send hands its message to, a timer and a
// select per waiting receive, and a time.AfterFunc per delay and per
// visibility timeout. bench_test.go measures the two side by side. It has
// no shutdown, bound on waiting receives, or metrics.
type naiveServer struct {
	mu     sync.Mutex // guards queues
	queues map[string]*naiveQueue
	parked atomic.Int64 // receives in their select, for the benchmarks to wait on
	mux    http.ServeMux
}

type naiveQueue struct {
	mu      sync.Mutex // guards everything below and the messages' fields
	nextID  uint64
	visible []*naiveMessage
	held    map[uint64]*naiveMessage
	delayed int
	waiters []*naiveWaiter // oldest first
}

type naiveMessage struct {
	id       uint64
	body     string
	receives int
	inFlight bool
	timer    *time.Timer // its delay's, then its visibility timeout's
}

type naiveWaiter struct {
	max int
	vis time.Duration
	ch  chan []Message // buffered: a send never blocks under the queue's lock
}

func newNaiveServer() *naiveServer {
	s := &naiveServer{queues: make(map[string]*naiveQueue)}
	s.mux.HandleFunc("POST /queues/{q}/messages", s.send)
	s.mux.HandleFunc("GET /queues/{q}/messages", s.receive)
	s.mux.HandleFunc("DELETE /queues/{q}/messages/{receipt}", s.delete)
	s.mux.HandleFunc("POST /queues/{q}/messages/{receipt}/visibility", s.changeVisibility)
	return s
}

func (s *naiveServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *naiveServer) queue(w http.ResponseWriter, r *http.Request) *naiveQueue {
	name, ok := queueNameOf(w, r)
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		q = &naiveQueue{held: make(map[uint64]*naiveMessage)}
		s.queues[name] = q
	}
	return q
}

func (s *naiveServer) send(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	delay, ok := duration(w, r, "delay", 0, maxDelay)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q.mu.Lock()
	q.nextID++
	m := &naiveMessage{id: q.nextID, body: string(body)}
	if delay > 0 {
		q.delayed++
		m.timer = time.AfterFunc(delay, func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.delayed--
			q.visibleLocked(m)
		})
	} else {
		q.visibleLocked(m)
	}
	q.mu.Unlock()
	writeJSON(w, map[string]string{"id": strconv.FormatUint(m.id, 10)})
}

// visibleLocked makes m visible and hands visible messages to waiting
// receives, oldest first.
func (q *naiveQueue) visibleLocked(m *naiveMessage) {
	m.inFlight = false
	delete(q.held, m.id)
	q.visible = append(q.visible, m)
	for len(q.waiters) > 0 && len(q.visible) > 0 {
		w := q.waiters[0]
		q.waiters[0] = nil
		q.waiters = q.waiters[1:]
		w.ch <- q.claimLocked(w.max, w.vis)
	}
}

func (q *naiveQueue) claimLocked(most int, vis time.Duration) []Message {
	n := min(most, len(q.visible))
	msgs := make([]Message, n)
	for i, m := range q.visible[:n] {
		q.visible[i] = nil
		m.inFlight = true
		m.receives++
		q.held[m.id] = m
		msgs[i] = Message{ID: strconv.FormatUint(m.id, 10), Body: m.body, Receipt: strconv.FormatUint(m.id, 10) + "." + strconv.Itoa(m.receives), Receives: m.receives}
		q.lapseAfterLocked(m, vis)
	}
	q.visible = q.visible[n:]
	return msgs
}

// lapseAfterLocked makes m visible again after vis, unless it is deleted
// or received again first.
func (q *naiveQueue) lapseAfterLocked(m *naiveMessage, vis time.Duration) {
	if m.timer != nil {
		m.timer.Stop()
	}
	k := m.receives
	m.timer = time.AfterFunc(vis, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if m.inFlight && m.receives == k && q.held[m.id] == m {
			q.visibleLocked(m)
		}
	})
}

func (s *naiveServer) receive(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	most, err := strconv.Atoi(cmp.Or(r.URL.Query().Get("max"), "1"))
	if err != nil || most < 1 || most > maxReceive {
		http.Error(w, "bad max", http.StatusBadRequest)
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
	q.mu.Lock()
	if len(q.visible) > 0 {
		msgs := q.claimLocked(most, vis)
		q.mu.Unlock()
		writeMessages(w, msgs)
		return
	}
	wt := &naiveWaiter{max: most, vis: vis, ch: make(chan []Message, 1)}
	q.waiters = append(q.waiters, wt)
	q.mu.Unlock()

	s.parked.Add(1)
	t := time.NewTimer(wait)
	defer t.Stop()
	var msgs []Message
	hungUp := false
	select {
	case msgs = <-wt.ch:
	case <-t.C:
	case <-r.Context().Done():
		hungUp = true
	}
	s.parked.Add(-1)
	if msgs == nil {
		// Leave the line, unless a send handed us messages meanwhile.
		q.mu.Lock()
		if i := slices.Index(q.waiters, wt); i >= 0 {
			q.waiters = slices.Delete(q.waiters, i, i+1)
		} else {
			msgs = <-wt.ch
			hungUp = false
		}
		q.mu.Unlock()
	}
	if !hungUp {
		writeMessages(w, msgs)
	}
}

func writeMessages(w http.ResponseWriter, msgs []Message) {
	if msgs == nil {
		msgs = []Message{}
	}
	writeJSON(w, struct {
		Messages []Message `json:"messages"`
	}{msgs})
}

// heldLocked returns the message in flight under receipt, or nil.
func (q *naiveQueue) heldLocked(receipt string) *naiveMessage {
	ids, ks, _ := strings.Cut(receipt, ".")
	id, _ := strconv.ParseUint(ids, 10, 64)
	k, _ := strconv.Atoi(ks)
	if m := q.held[id]; m != nil && m.receives == k {
		return m
	}
	return nil
}

func (s *naiveServer) delete(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.heldLocked(r.PathValue("receipt"))
	if m == nil {
		receiptDone(w, ErrReceipt)
		return
	}
	m.timer.Stop()
	m.inFlight = false
	delete(q.held, m.id)
	receiptDone(w, nil)
}

func (s *naiveServer) changeVisibility(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w, r)
	if q == nil {
		return
	}
	d, ok := duration(w, r, "timeout", 0, maxVisibility)
	if !ok {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.heldLocked(r.PathValue("receipt"))
	if m == nil {
		receiptDone(w, ErrReceipt)
		return
	}
	if d == 0 {
		m.timer.Stop()
		q.visibleLocked(m)
	} else {
		q.lapseAfterLocked(m, d)
	}
	receiptDone(w, nil)
}

// The naive server answers as the real one does, so that the benchmarks
// compare like with like: the oldest waiting receive gets a message, a
// lapsed visibility brings it back with a new receipt, the wait ends empty.
func TestNaiveServerAgrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newNaiveServer()
		var rs []*call
		for range 3 {
			rs = append(rs, start(s, httptest.NewRequest("GET", "/queues/q/messages?wait=1m&visibility=10s", nil)))
			synctest.Wait()
		}
		require.Equal(t, int64(3), s.parked.Load())
		id := send(t, s, "/queues/q/messages", "job")
		first := rs[0].messages(t)
		assert.Equal(t, []Message{{ID: id, Body: "job", Receipt: id + ".1", Receives: 1}}, first)
		synctest.Wait()
		assert.False(t, rs[1].finished())

		time.Sleep(10 * time.Second)
		again := rs[1].messages(t)
		assert.Equal(t, id+".2", again[0].Receipt)
		assert.Equal(t, http.StatusGone, do(s, "DELETE", "/queues/q/messages/"+first[0].Receipt, "").Code)
		assert.Equal(t, http.StatusNoContent, do(s, "DELETE", "/queues/q/messages/"+again[0].Receipt, "").Code)

		begun := time.Now()
		assert.Empty(t, rs[2].messages(t))
		assert.Equal(t, begun.Add(50*time.Second), rs[2].at)
		assert.Equal(t, int64(0), s.parked.Load())
	})
}
