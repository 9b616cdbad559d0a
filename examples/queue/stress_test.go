package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ledger is what the stress test's clients saw: each delivery of each
// message (by its receive count) and each delete that succeeded.
type ledger struct {
	mu         sync.Mutex
	deliveries map[string][]int // id -> receive counts delivered
	deleted    map[string][]int // id -> receive counts whose receipt deleted it
}

func (l *ledger) delivered(msgs []Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		l.deliveries[m.ID] = append(l.deliveries[m.ID], m.Receives)
	}
}

func (l *ledger) deletedBy(m Message) (all int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deleted[m.ID] = append(l.deleted[m.ID], m.Receives)
	return len(l.deleted)
}

// Receivers on the real clock race senders, delays, visibility timeouts
// that lapse, changes of visibility, deletes and hang-ups, under -race.
// Every message must be delivered with receive counts 1, 2, ..., K and no
// count twice (a count seen twice is one claim handed to two receivers; a
// gap is a claim answered to nobody), and deleted exactly once, by the
// receipt of its last delivery: a delete that worked for an earlier
// receipt means a later delivery was made while that receipt was still
// valid, two receivers inside one visibility window.
func TestStress(t *testing.T) {
	const (
		messages  = 600
		senders   = 2
		receivers = 6
	)
	s := newTestServer(t, config{})
	l := &ledger{deliveries: make(map[string][]int), deleted: make(map[string][]int)}
	done := make(chan struct{}) // closed once every message is deleted
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			for j := range messages / senders {
				target := "/queues/q/messages"
				if j%3 == 0 {
					target += fmt.Sprintf("?delay=%dms", rand.N(5))
				}
				rec := do(s, "POST", target, fmt.Sprint("m", i, "-", j))
				assert.Equal(t, http.StatusOK, rec.Code)
				// Paced, so that receivers park and hang up while parked.
				time.Sleep(time.Duration(rand.N(1000)) * time.Microsecond)
			}
		})
	}
	for range receivers {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				ctx, hangUp := context.WithCancel(context.Background())
				hungUp := rand.N(4) == 0
				if hungUp {
					time.AfterFunc(time.Duration(rand.N(3000))*time.Microsecond, hangUp)
				}
				target := fmt.Sprintf("/queues/q/messages?max=%d&visibility=20ms&wait=10ms", 1+rand.N(3))
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, httptest.NewRequest("GET", target, nil).WithContext(ctx))
				hangUp()
				if rec.Body.Len() == 0 { // the hang-up came first: nothing taken
					assert.True(t, hungUp)
					continue
				}
				msgs := decode(t, rec)
				l.delivered(msgs)
				if hungUp {
					continue // gone: its messages come back when their visibility lapses
				}
				for _, m := range msgs {
					switch rand.N(8) {
					case 0: // abandoned
						continue
					case 1:
						do(s, "POST", "/queues/q/messages/"+m.Receipt+"/visibility?timeout=30ms", "")
					case 2, 3: // slow: may outlive the visibility timeout
						time.Sleep(time.Duration(rand.N(40)) * time.Millisecond)
					}
					if do(s, "DELETE", "/queues/q/messages/"+m.Receipt, "").Code == http.StatusNoContent {
						if l.deletedBy(m) == messages {
							close(done)
						}
					}
				}
			}
		})
	}
	wg.Wait()

	require.Len(t, l.deleted, messages, "every message deleted")
	for id, ks := range l.deliveries {
		slices.Sort(ks)
		want := make([]int, len(ks))
		for i := range want {
			want[i] = i + 1
		}
		require.Equal(t, want, ks, "message %s: receive counts delivered", id)
		require.Equal(t, []int{len(ks)}, l.deleted[id], "message %s: deleted once, by its last delivery's receipt", id)
	}
	assert.JSONEq(t, `{"visible":0,"in_flight":0,"delayed":0}`, counts(t, s, "q"))
	assert.Equal(t, 0, s.svc.p.NumDelayed())
	t.Logf("%d deliveries of %d messages; purgatory: %+v", sumLens(l.deliveries), messages, s.svc.p.Stats())
}

func sumLens(m map[string][]int) (n int) {
	for _, v := range m {
		n += len(v)
	}
	return n
}

// A hang-up racing the claim of a message: a receive is parked, then a
// send (whose check claims the message for it) and the client's hang-up
// come at once. Either the receive answers the message, or the hang-up
// won and the message is still visible; never is the message in flight
// with nobody told of it. (Ending the receive with ForceComplete instead
// of Complete strands a claim in a fraction of a percent of rounds.)
func TestHangUpRacingAClaim(t *testing.T) {
	rounds := 5000
	if testing.Short() {
		rounds = 500
	}
	s := newTestServer(t, config{})
	q := s.svc.queue("q")
	var answered, hungUp int
	for i := range rounds {
		ctx, hangUp := context.WithCancel(context.Background())
		type result struct {
			msgs []Message
			ok   bool
		}
		res := make(chan result, 1)
		go func() {
			msgs, ok, err := s.svc.receive(ctx, q, 1, time.Minute, time.Minute)
			assert.NoError(t, err)
			res <- result{msgs, ok}
		}()
		for s.svc.p.NumDelayed() != 1 {
			time.Sleep(10 * time.Microsecond)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := q.send("m", 0)
			assert.NoError(t, err)
		})
		wg.Go(hangUp)
		wg.Wait()
		r := <-res
		v, f, _ := q.counts()
		if r.ok {
			answered++
			require.Len(t, r.msgs, 1, "round %d", i)
			require.Equal(t, [2]int{0, 1}, [2]int{v, f}, "round %d: visible, in flight", i)
			require.NoError(t, q.delete(r.msgs[0].Receipt))
			continue
		}
		hungUp++
		require.Equal(t, [2]int{1, 0}, [2]int{v, f}, "round %d: a claim stranded", i)
		msgs, ok, err := s.svc.receive(context.Background(), q, 1, time.Minute, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Len(t, msgs, 1)
		require.NoError(t, q.delete(msgs[0].Receipt))
	}
	t.Logf("%d rounds: %d answered, %d hung up first", rounds, answered, hungUp)
}
