package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/purgatory-go/purgatory/timer"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/groups"
)

// mockGroups drives a Coordinator on a MockTimer by hand: every callback
// runs on the test's goroutine, inside the call that completes it.
type mockGroups struct {
	t  *testing.T
	c  *Coordinator
	mt *timer.MockTimer
	// log is what the purgatories logged: a test fails if it is not empty
	// at the end (a refused park, a panic in a callback).
	log syncBuffer

	mu      sync.Mutex
	removed []removedMember
}

type removedMember struct {
	group, member string
	why           groups.Removal
	at            time.Duration // on the mock clock
}

func newMockGroups(t *testing.T, cfg GroupConfig) *mockGroups {
	t.Helper()
	mg := &mockGroups{t: t, mt: timer.NewMockTimer()}
	cfg.Timer = mg.mt
	cfg.Logger = slog.New(slog.NewTextHandler(&mg.log, nil))
	if cfg.InitialRebalanceDelay == 0 {
		cfg.InitialRebalanceDelay = 100 * time.Millisecond // so that stableGroup's members form one generation
	}
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = time.Millisecond
	}
	cfg.OnRemove = func(group string, m groups.MemberSummary, why groups.Removal) {
		mg.mu.Lock()
		defer mg.mu.Unlock()
		mg.removed = append(mg.removed, removedMember{group: group, member: m.ID, why: why, at: mg.mt.Now()})
	}
	c, err := NewCoordinator(cfg)
	require.NoError(t, err)
	mg.c = c
	t.Cleanup(func() {
		assert.NoError(t, c.Close(context.Background()))
		assert.Empty(t, mg.log.String(), "the purgatories logged nothing")
	})
	return mg
}

func (mg *mockGroups) removals() []removedMember {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return append([]removedMember(nil), mg.removed...)
}

const (
	mockSession   = time.Second
	mockRebalance = 3 * time.Second
)

func (mg *mockGroups) join(group, member string) <-chan groups.JoinResult {
	ch := make(chan groups.JoinResult, 1)
	mg.c.Join(groups.JoinRequest{Group: group, MemberID: member, ClientID: "client", ProtocolType: "consumer",
		Protocols: []groups.Protocol{{Name: "range", Metadata: []byte("m")}}, Session: mockSession, Rebalance: mockRebalance},
		func(r groups.JoinResult) { ch <- r })
	return ch
}

func (mg *mockGroups) sync(group string, gen int32, member string, assign map[string][]byte) <-chan groups.SyncResult {
	ch := make(chan groups.SyncResult, 1)
	mg.c.Sync(group, gen, member, nil, nil, assign, func(r groups.SyncResult) { ch <- r })
	return ch
}

// done returns what ch holds now; with a MockTimer an answer is there as
// soon as the call that completed it has returned.
func done[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatalf("%s: not answered", what)
		var zero T
		return zero
	}
}

// describe shows a join or sync result with its error's name.
func describe(v any) string {
	switch r := v.(type) {
	case groups.JoinResult:
		return fmt.Sprintf("%v, generation %d, member %s", r.Err, r.Generation, r.MemberID)
	case groups.SyncResult:
		return fmt.Sprintf("%v, assignment %q", r.Err, r.Assignment)
	}
	return fmt.Sprint(v)
}

func waiting[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: answered early: %s", what, describe(v))
	default:
	}
}

// stableGroup forms group id of n members at generation 1 and returns
// their ids, the leader first.
func (mg *mockGroups) stableGroup(id string, n int) []string {
	t := mg.t
	t.Helper()
	var chs []<-chan groups.JoinResult
	for range n {
		chs = append(chs, mg.join(id, ""))
	}
	// Through the initial delay, a step at a time: sessions start at the
	// join's answer, and must not run out before the syncs below.
	for i := 0; len(chs[0]) == 0 && i < 1000; i++ {
		mg.mt.Advance(10 * time.Millisecond)
	}
	var ids []string
	for i, ch := range chs {
		r := done(t, ch, fmt.Sprintf("member %d's join", i))
		require.Nil(t, r.Err)
		ids = append(ids, r.MemberID)
	}
	assign := map[string][]byte{}
	for _, m := range ids {
		assign[m] = []byte("a-" + m)
	}
	var syncs []<-chan groups.SyncResult
	for i := len(ids) - 1; i >= 0; i-- { // the leader last: the others wait for it
		syncs = append(syncs, mg.sync(id, 1, ids[i], assign))
	}
	for i, ch := range syncs {
		r := done(t, ch, fmt.Sprintf("sync %d", i))
		require.Nil(t, r.Err)
	}
	return ids
}

// Reference: Kafka's GroupCoordinatorTest
// shouldDelayRebalanceUptoRebalanceTimeout. The first rebalance of an empty
// group waits the initial delay, again each time a member came during the
// last one, but no longer than the rebalance timeout: the delayed join
// re-parks itself from its own OnComplete, under the group's SharedLock.
func TestGroupInitialRebalanceDelayGrowsUpToTheRebalanceTimeout(t *testing.T) {
	mg := newMockGroups(t, GroupConfig{InitialRebalanceDelay: time.Second})
	first := mg.join("g", "")
	mg.mt.Advance(900 * time.Millisecond)
	second := mg.join("g", "")
	mg.mt.Advance(100 * time.Millisecond) // 1 s: the delay ends with a newcomer, so it waits again
	waiting(t, first, "after one delay with a newcomer")
	mg.mt.Advance(999 * time.Millisecond)
	third := mg.join("g", "")
	mg.mt.Advance(time.Millisecond) // 2 s: again
	waiting(t, first, "after two delays with newcomers")
	mg.mt.Advance(999 * time.Millisecond)
	waiting(t, first, "before the rebalance timeout")
	mg.mt.Advance(time.Millisecond) // 3 s: the rebalance timeout is used up
	var leader string
	for i, ch := range []<-chan groups.JoinResult{first, second, third} {
		r := done(t, ch, fmt.Sprintf("join %d at the rebalance timeout", i))
		require.Nil(t, r.Err)
		assert.Equal(t, int32(1), r.Generation, "one generation for all three")
		if i == 0 {
			leader = r.MemberID
			assert.Len(t, r.Members, 3)
		}
		assert.Equal(t, leader, r.Leader)
	}
	st := mg.c.join.Stats()
	assert.Equal(t, uint64(3), st.Expired, "three delays, each a delayed join of its own")
	assert.Equal(t, 0, st.Pending)
}

// With no newcomer during the delay, the first rebalance waits it once.
func TestGroupInitialRebalanceDelayOnce(t *testing.T) {
	mg := newMockGroups(t, GroupConfig{InitialRebalanceDelay: 100 * time.Millisecond})
	ch := mg.join("g", "")
	mg.mt.Advance(99 * time.Millisecond)
	waiting(t, ch, "before the delay")
	mg.mt.Advance(time.Millisecond)
	assert.Equal(t, int32(1), done(t, ch, "after the delay").Generation)
}

// Reference: GroupCoordinatorTest testHeartbeatWrongCoordinator and
// testSessionTimeout family. A member that stops heartbeating is dropped
// at exactly its session timeout after its last heartbeat, never before,
// with each way of keeping the session (ResetTimeout, and Kafka's
// complete-and-re-park); heartbeats keep it indefinitely.
func TestGroupSessionExpiresExactly(t *testing.T) {
	for _, repark := range []bool{false, true} {
		t.Run(fmt.Sprintf("repark=%v", repark), func(t *testing.T) {
			mg := newMockGroups(t, GroupConfig{Repark: repark})
			ids := mg.stableGroup("g", 2)
			for range 50 { // 5 s of heartbeats every 100 ms: never expired
				for _, id := range ids {
					require.Nil(t, mg.c.Heartbeat("g", 1, id))
				}
				mg.mt.Advance(100 * time.Millisecond)
			}
			require.Empty(t, mg.removals())
			// ids[1] stops; ids[0] goes on.
			require.Nil(t, mg.c.Heartbeat("g", 1, ids[1]))
			stopped := mg.mt.Now()
			for mg.mt.Now() < stopped+mockSession-time.Millisecond {
				require.Nil(t, mg.c.Heartbeat("g", 1, ids[0]))
				mg.mt.Advance(time.Millisecond)
			}
			require.Empty(t, mg.removals(), "not a millisecond early")
			mg.mt.Advance(time.Millisecond)
			rs := mg.removals()
			require.Len(t, rs, 1)
			assert.Equal(t, removedMember{group: "g", member: ids[1], why: groups.RemovedSessionExpiry, at: stopped + mockSession}, rs[0])
			assert.Equal(t, kerr.RebalanceInProgress, mg.c.Heartbeat("g", 1, ids[0]), "the group rebalances without it")
			assert.Equal(t, kerr.UnknownMemberID, mg.c.Heartbeat("g", 1, ids[1]))
			st := mg.c.heartbeat.Stats()
			assert.Equal(t, uint64(1), st.Expired)
			if repark {
				assert.Greater(t, st.CompletedEarly, uint64(100), "each heartbeat completed one operation")
			} else {
				assert.Zero(t, st.CompletedEarly, "the one operation per member stayed parked")
			}
		})
	}
}

// Without an initial delay, a first member's JoinGroup completes the
// rebalance before its handler releases the group's lock, so while its
// session's park is still to be finished: the session is left to that park
// (no refused park, no second operation), both ways, and expires on time.
func TestGroupJoinCompletedUnderTheHandlersLock(t *testing.T) {
	for _, repark := range []bool{false, true} {
		t.Run(fmt.Sprintf("repark=%v", repark), func(t *testing.T) {
			mg := newMockGroups(t, GroupConfig{InitialRebalanceDelay: -1, Repark: repark})
			r := done(t, mg.join("g", ""), "the first member's join, at once")
			require.Nil(t, r.Err)
			require.Equal(t, int32(1), r.Generation)
			st := mg.c.heartbeat.Stats()
			assert.Equal(t, 1, st.Pending, "one session")
			if !repark {
				assert.Zero(t, st.CompletedEarly, "the session parked at the join is the one reset since")
			}
			assert.Equal(t, []byte("x"), done(t, mg.sync("g", 1, r.MemberID, map[string][]byte{r.MemberID: []byte("x")}), "sync").Assignment)
			mg.mt.Advance(mockSession)
			rs := mg.removals()
			require.Len(t, rs, 1)
			assert.Equal(t, groups.RemovedSessionExpiry, rs[0].why)
		})
	}
}

// Reference: GroupCoordinatorTest testRebalanceCompletesBeforeMemberJoins
// and DelayedJoin's expiry: a rebalance completes at the rebalance timeout
// without the member that did not rejoin (it kept heartbeating, but a
// heartbeat is not a JoinGroup), and the others form the next generation.
func TestGroupRebalanceTimeoutDropsMembersThatDidNotRejoin(t *testing.T) {
	mg := newMockGroups(t, GroupConfig{})
	ids := mg.stableGroup("g", 2)
	newcomer := mg.join("g", "")
	rejoin := mg.join("g", ids[0])
	start := mg.mt.Now()
	for mg.mt.Now() < start+mockRebalance-100*time.Millisecond {
		assert.Equal(t, kerr.RebalanceInProgress, mg.c.Heartbeat("g", 1, ids[1]))
		mg.mt.Advance(100 * time.Millisecond)
	}
	waiting(t, rejoin, "before the rebalance timeout")
	mg.mt.Advance(100 * time.Millisecond)
	r := done(t, rejoin, "at the rebalance timeout")
	require.Nil(t, r.Err)
	assert.Equal(t, int32(2), r.Generation)
	assert.Len(t, r.Members, 2, "the leader and the newcomer")
	assert.Equal(t, int32(2), done(t, newcomer, "the newcomer").Generation)
	rs := mg.removals()
	require.Len(t, rs, 1)
	assert.Equal(t, ids[1], rs[0].member)
	assert.Equal(t, groups.RemovedNotRejoined, rs[0].why)
	assert.Equal(t, kerr.UnknownMemberID, mg.c.Heartbeat("g", 2, ids[1]))
}

// A member id handed out with MEMBER_ID_REQUIRED holds a rebalance until
// the member joins with it or its session passes (Kafka's pending
// members), and a member that does not send its SyncGroup is dropped when
// its generation's DelayedSync expires.
func TestGroupPendingMemberAndPendingSyncExpire(t *testing.T) {
	mg := newMockGroups(t, GroupConfig{})
	ids := mg.stableGroup("g", 1)
	var pendingID string
	mg.c.Join(groups.JoinRequest{Group: "g", ClientID: "p", ProtocolType: "consumer", Protocols: []groups.Protocol{{Name: "range"}},
		Session: mockSession, Rebalance: mockRebalance, RequireKnownMemberID: true}, func(r groups.JoinResult) {
		assert.Equal(t, kerr.MemberIDRequired, r.Err)
		pendingID = r.MemberID
	})
	require.NotEmpty(t, pendingID)
	second := mg.join("g", "")
	first := mg.join("g", ids[0])
	waiting(t, first, "with a member id pending")
	mg.mt.Advance(mockSession)
	r := done(t, first, "once the pending id's session passed")
	require.Equal(t, int32(2), r.Generation)
	assert.Len(t, r.Members, 2, "without the pending member")
	r2 := done(t, second, "the second member")

	// The leader syncs; the second member never does.
	assign := map[string][]byte{ids[0]: []byte("x"), r2.MemberID: []byte("y")}
	assert.Equal(t, []byte("x"), done(t, mg.sync("g", 2, ids[0], assign), "the leader's sync").Assignment)
	start := mg.mt.Now()
	for mg.mt.Now() < start+mockRebalance-100*time.Millisecond {
		require.Nil(t, mg.c.Heartbeat("g", 2, ids[0]))
		require.Nil(t, mg.c.Heartbeat("g", 2, r2.MemberID), "heartbeats do not replace the SyncGroup")
		mg.mt.Advance(100 * time.Millisecond)
	}
	require.Empty(t, mg.removals())
	mg.mt.Advance(100 * time.Millisecond)
	rs := mg.removals()
	require.Len(t, rs, 1)
	assert.Equal(t, r2.MemberID, rs[0].member)
	assert.Equal(t, groups.RemovedNotSynced, rs[0].why)
	assert.Equal(t, kerr.RebalanceInProgress, mg.c.Heartbeat("g", 2, ids[0]))
}

// Closing the coordinator answers every parked JoinGroup and SyncGroup
// with NOT_COORDINATOR at once, by CompleteForKey on each group's keys,
// not at their timeouts; sessions end the same way, and later requests
// get COORDINATOR_NOT_AVAILABLE.
func TestGroupCloseAnswersParkedRequests(t *testing.T) {
	mg := newMockGroups(t, GroupConfig{InitialRebalanceDelay: 100 * time.Millisecond})
	// g2: a follower's SyncGroup parked, waiting for the leader's.
	first, second := mg.join("g2", ""), mg.join("g2", "")
	mg.mt.Advance(100 * time.Millisecond) // the initial delay, with a newcomer
	mg.mt.Advance(100 * time.Millisecond) // and once more
	follower := done(t, second, "g2's second join").MemberID
	done(t, first, "g2's first join")
	parkedSync := mg.sync("g2", 1, follower, nil)
	// g1: a rebalance in progress, with a JoinGroup parked. (Well within
	// g2's leader's session.)
	ids := mg.stableGroup("g1", 2)
	parkedJoin := mg.join("g1", ids[0])
	// g3: a JoinGroup parked in the initial delay.
	initial := mg.join("g3", "")
	waiting(t, parkedJoin, "g1's join")
	waiting(t, parkedSync, "g2's sync")
	waiting(t, initial, "g3's join")

	require.NoError(t, mg.c.Close(context.Background()))
	assert.Equal(t, kerr.NotCoordinator, done(t, parkedJoin, "g1's join").Err)
	assert.Equal(t, kerr.NotCoordinator, done(t, parkedSync, "g2's sync").Err)
	assert.Equal(t, kerr.NotCoordinator, done(t, initial, "g3's join").Err)
	assert.Equal(t, uint64(2), mg.c.join.Stats().CompletedForKey, "g1's and g3's delayed joins")
	assert.Equal(t, uint64(1), mg.c.sync.Stats().CompletedForKey, "g2's delayed sync")
	assert.Equal(t, uint64(5), mg.c.heartbeat.Stats().CompletedForKey, "every member's session")
	for _, p := range []int{mg.c.join.Stats().Pending, mg.c.sync.Stats().Pending, mg.c.heartbeat.Stats().Pending} {
		assert.Zero(t, p)
	}
	assert.Equal(t, kerr.CoordinatorNotAvailable, mg.c.Heartbeat("g1", 1, ids[1]))
	assert.Equal(t, kerr.CoordinatorNotAvailable, done(t, mg.join("g4", ""), "a join after close").Err)
	assert.Empty(t, mg.removals(), "unloading is not removing members")
}

// 10,000 members in 100 groups heartbeat every 100 ms for 30 s of
// MockTimer time, the coordinator's Heartbeat called directly. Ten groups
// stop heartbeating at staggered times: each of their members is dropped
// exactly its session after its last heartbeat (the clock moves a
// millisecond, the SystemTimer's tick, at a time), and no member that
// heartbeats is ever dropped. Each member costs a bounded amount of heap.
func TestGroupHeartbeatsAtScale(t *testing.T) {
	// The same size whatever the build: about 18 s under the race
	// detector on two cores, 0.4 s without.
	const nGroups, perGroup = 100, 100
	const (
		every    = 100 * time.Millisecond
		step     = time.Millisecond
		duration = 30 * time.Second
	)
	mt := timer.NewMockTimer()
	session := func(g int) time.Duration { return time.Second + time.Duration(g%5)*500*time.Millisecond }
	stoppedGroup := func(g int) bool { return g%10 == 3 }
	stopAt := func(g int) time.Duration {
		return 2*time.Second + time.Duration(g)*200*time.Millisecond + 37*time.Millisecond
	}

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc

	type sim struct {
		group, id string
		g         int
		last      time.Duration
		stopped   bool
	}
	var mu sync.Mutex
	removedAt := map[string]time.Duration{}
	var unexpected []string
	onRemove := func(group string, m groups.MemberSummary, why groups.Removal) {
		mu.Lock()
		defer mu.Unlock()
		if why != groups.RemovedSessionExpiry {
			unexpected = append(unexpected, fmt.Sprintf("%s/%s removed for %d", group, m.ID, why))
		}
		removedAt[m.ID] = mt.Now()
	}
	c, err := NewCoordinator(GroupConfig{InitialRebalanceDelay: every, MinSessionTimeout: every, Timer: mt, OnRemove: onRemove})
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close(context.Background())) }()
	members := make([]*sim, 0, nGroups*perGroup)
	joined := make([]groups.JoinResult, nGroups*perGroup)
	for g := range nGroups {
		name := fmt.Sprintf("group-%03d", g)
		for i := range perGroup {
			k := g*perGroup + i
			c.Join(groups.JoinRequest{Group: name, ClientID: "consumer", ProtocolType: "consumer",
				Protocols: []groups.Protocol{{Name: "range"}}, Session: session(g), Rebalance: 5 * time.Second},
				func(r groups.JoinResult) { joined[k] = r })
			members = append(members, &sim{group: name, g: g})
		}
	}
	// The initial delay, twice: members came during the first. (A
	// MockTimer's Advance moves the clock first and then runs what is due,
	// so the second delay, parked by the first's completion, counts from
	// the end of its Advance.)
	mt.Advance(every)
	mt.Advance(every)
	for k, s := range members {
		require.Nil(t, joined[k].Err)
		require.Equal(t, int32(1), joined[k].Generation)
		s.id = joined[k].MemberID
	}
	for g := range nGroups { // the leader syncs last, releasing the others
		for i := perGroup - 1; i >= 0; i-- {
			s := members[g*perGroup+i]
			c.Sync(s.group, 1, s.id, nil, nil, map[string][]byte{}, func(r groups.SyncResult) { require.Nil(t, r.Err) })
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	perMember := float64(int64(ms.HeapAlloc)-int64(before)) / float64(len(members))
	t.Logf("%d members in %d groups: %.0f B of heap per member (groups, members, sessions and the three purgatories)",
		len(members), nGroups, perMember)
	assert.Less(t, perMember, 4096.0, "heap per member")

	start := mt.Now()
	heartbeats := 0
	for now := time.Duration(0); now < duration; now += step {
		if now%every == 0 {
			for _, s := range members {
				if s.stopped {
					continue
				}
				if stoppedGroup(s.g) && now >= stopAt(s.g) {
					s.stopped = true
					continue
				}
				if e := c.Heartbeat(s.group, 1, s.id); e != nil {
					t.Fatalf("%s/%s heartbeating at %v: %v", s.group, s.id, now, e)
				}
				s.last = mt.Now()
				heartbeats++
			}
		}
		mt.Advance(step)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, unexpected)
	stopped := 0
	for _, s := range members {
		at, gone := removedAt[s.id]
		if !s.stopped {
			assert.False(t, gone, "%s/%s heartbeated and was dropped at %v", s.group, s.id, at)
			continue
		}
		stopped++
		require.True(t, gone, "%s/%s stopped at %v and was never dropped", s.group, s.id, s.last)
		due := s.last + session(s.g)
		assert.True(t, at >= due && at <= due+step, "%s/%s due at %v, dropped at %v", s.group, s.id, due, at)
	}
	assert.Equal(t, stopped, len(removedAt))
	assert.Positive(t, stopped)
	t.Logf("%d heartbeats over %v of mock time; %d members stopped and each dropped within %v of its deadline",
		heartbeats, mt.Now()-start, stopped, step)
	st := c.heartbeat.Stats()
	assert.Equal(t, uint64(stopped), st.Expired)
	assert.Equal(t, len(members)-stopped, st.Pending, "one parked session per live member, all the time")
}
