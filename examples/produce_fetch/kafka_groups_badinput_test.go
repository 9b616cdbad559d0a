package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
)

// groupAPI sends the group requests of a hand-driven member, at the
// newest versions both sides know, straight to the broker.
type groupAPI struct {
	t    *testing.T
	ctx  context.Context
	br   *kgo.Broker
	addr string
}

func newGroupAPI(t *testing.T, kb *kafkaBroker, opts ...kgo.Opt) *groupAPI {
	return &groupAPI{t: t, ctx: testCtx(t, 60*time.Second), br: kb.client(t, opts...).Broker(0), addr: kb.addr}
}

type joinOpts struct {
	group, member, protocolType string
	protocols                   []string
	session                     time.Duration
}

// joinAsync sends a JoinGroup, which may wait for the rebalance.
func (a *groupAPI) joinAsync(o joinOpts) <-chan *kmsg.JoinGroupResponse {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID = o.group, o.member
	req.SessionTimeoutMillis = int32(cmpOr(o.session, 6*time.Second) / time.Millisecond)
	req.RebalanceTimeoutMillis = 10_000
	req.ProtocolType = cmpOr(o.protocolType, "consumer")
	for _, p := range cmpOr(o.protocols, []string{"range"}) {
		jp := kmsg.NewJoinGroupRequestProtocol()
		jp.Name, jp.Metadata = p, []byte("meta-"+p)
		req.Protocols = append(req.Protocols, jp)
	}
	out := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, err := req.RequestWith(a.ctx, a.br)
		if err != nil {
			resp = &kmsg.JoinGroupResponse{ErrorCode: -2}
		}
		out <- resp
	}()
	return out
}

func (a *groupAPI) join(o joinOpts) *kmsg.JoinGroupResponse {
	a.t.Helper()
	select {
	case resp := <-a.joinAsync(o):
		require.NotEqual(a.t, int16(-2), resp.ErrorCode, "the request failed")
		return resp
	case <-a.ctx.Done():
		a.t.Fatal("JoinGroup not answered")
		return nil
	}
}

// joinNew joins as a new member: the first JoinGroup gets the member id
// (MEMBER_ID_REQUIRED), the second parks until the rebalance completes.
func (a *groupAPI) joinNew(o joinOpts) (first string, done <-chan *kmsg.JoinGroupResponse) {
	a.t.Helper()
	resp := a.join(o)
	require.Equal(a.t, kerr.MemberIDRequired.Code, resp.ErrorCode)
	require.NotEmpty(a.t, resp.MemberID)
	o.member = resp.MemberID
	return resp.MemberID, a.joinAsync(o)
}

func (a *groupAPI) syncAsync(group string, gen int32, member string, assign map[string]string) <-chan *kmsg.SyncGroupResponse {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.Generation, req.MemberID = group, gen, member
	for id, v := range assign {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = id, []byte(v)
		req.GroupAssignment = append(req.GroupAssignment, ga)
	}
	out := make(chan *kmsg.SyncGroupResponse, 1)
	go func() {
		resp, err := req.RequestWith(a.ctx, a.br)
		if err != nil {
			resp = &kmsg.SyncGroupResponse{ErrorCode: -2}
		}
		out <- resp
	}()
	return out
}

func (a *groupAPI) sync(group string, gen int32, member string, assign map[string]string) *kmsg.SyncGroupResponse {
	a.t.Helper()
	resp := <-a.syncAsync(group, gen, member, assign)
	require.NotEqual(a.t, int16(-2), resp.ErrorCode, "the request failed")
	return resp
}

func (a *groupAPI) heartbeat(group string, gen int32, member string) int16 {
	a.t.Helper()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID = group, gen, member
	resp, err := req.RequestWith(a.ctx, a.br)
	require.NoError(a.t, err)
	return resp.ErrorCode
}

func (a *groupAPI) leave(group string, members ...string) *kmsg.LeaveGroupResponse {
	a.t.Helper()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for _, m := range members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m
		req.Members = append(req.Members, lm)
	}
	resp, err := req.RequestWith(a.ctx, a.br)
	require.NoError(a.t, err)
	return resp
}

// commit commits offset for partitions 0 and 1 of t, and for a partition of
// a topic that does not exist; it returns the three errors.
func (a *groupAPI) commit(group string, gen int32, member string, offset int64) []int16 {
	a.t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation, req.MemberID = group, gen, member
	for _, topic := range []string{"t", "nope"} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		for p := range int32(2) {
			if topic == "nope" && p > 0 {
				break
			}
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, offset
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(a.ctx, a.br)
	require.NoError(a.t, err)
	var codes []int16
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			codes = append(codes, rp.ErrorCode)
		}
	}
	return codes
}

// fetchOffsets reads the group's committed offsets of t's partitions 0-2.
func (a *groupAPI) fetchOffsets(group string) []int64 {
	a.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	rt := kmsg.NewOffsetFetchRequestGroupTopic()
	rt.Topic, rt.Partitions = "t", []int32{0, 1, 2}
	rg.Topics = append(rg.Topics, rt)
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(a.ctx, a.br)
	require.NoError(a.t, err)
	require.Len(a.t, resp.Groups, 1)
	require.Equal(a.t, int16(0), resp.Groups[0].ErrorCode)
	var offsets []int64
	for _, t := range resp.Groups[0].Topics {
		for _, p := range t.Partitions {
			offsets = append(offsets, p.Offset)
		}
	}
	return offsets
}

// describe sends a DescribeGroups at version over a raw connection (a
// client library would pick its own version).
func (a *groupAPI) describe(version int16, group string) kmsg.DescribeGroupsResponseGroup {
	a.t.Helper()
	c := dialRaw(a.t, a.addr)
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	corr := c.send(req, version)
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.SetVersion(version)
	c.receive(resp, corr, version >= 5)
	require.Len(a.t, resp.Groups, 1)
	return resp.Groups[0]
}

func cmpOr[T any](v, def T) T {
	switch x := any(v).(type) {
	case time.Duration:
		if x == 0 {
			return def
		}
	case string:
		if x == "" {
			return def
		}
	case []string:
		if x == nil {
			return def
		}
	}
	return v
}

func received[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("%s: no answer", what)
		var zero T
		return zero
	}
}

func notYet[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s was answered early: %+v", what, v)
	case <-time.After(50 * time.Millisecond):
	}
}

// Bad group requests are answered with Kafka's error codes and leave the
// group working: unknown group, wrong generation, unknown member id, a
// member id reused after its member left, a SyncGroup before its
// JoinGroup, a heartbeat after LeaveGroup, heartbeats during a rebalance,
// empty group ids, out-of-range session timeouts and protocols that do
// not match.
func TestKafkaGroupBadInput(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Topics: []string{"t"}, Partitions: 4, Groups: GroupConfig{
		InitialRebalanceDelay: 100 * time.Millisecond, MinSessionTimeout: time.Second, MaxSessionTimeout: time.Minute}}, kafkawire.Config{})
	// A and B are two clients, with connections of their own: a
	// connection's answers come in request order (as in Kafka), so B's
	// parked JoinGroup would hold back A's answers on a shared one.
	a, b := newGroupAPI(t, kb), newGroupAPI(t, kb)
	const g = "g"

	// A alone: generation 1, Stable.
	ida, done := a.joinNew(joinOpts{group: g})
	ja := received(t, a.ctx, done, "A's join")
	require.Equal(t, int16(0), ja.ErrorCode)
	require.Equal(t, int32(1), ja.Generation)
	require.Equal(t, ida, ja.LeaderID)
	require.Len(t, ja.Members, 1, "the leader gets the members' metadata")
	require.Equal(t, "meta-range", string(ja.Members[0].ProtocolMetadata))
	require.Equal(t, "a1", string(a.sync(g, 1, ida, map[string]string{ida: "a1"}).MemberAssignment))
	require.Equal(t, int16(0), a.heartbeat(g, 1, ida))

	t.Run("unknown group", func(t *testing.T) {
		assert.Equal(t, code(kerr.UnknownMemberID), a.heartbeat("nope", 1, ida))
		assert.Equal(t, code(kerr.UnknownMemberID), a.sync("nope", 1, ida, nil).ErrorCode)
		assert.Equal(t, code(kerr.UnknownMemberID), a.join(joinOpts{group: "nope", member: ida}).ErrorCode)
		lr := a.leave("nope", ida)
		assert.Equal(t, int16(0), lr.ErrorCode)
		require.Len(t, lr.Members, 1)
		assert.Equal(t, code(kerr.UnknownMemberID), lr.Members[0].ErrorCode)
		assert.Equal(t, code(kerr.GroupIDNotFound), a.describe(6, "nope").ErrorCode)
		d5 := a.describe(5, "nope")
		assert.Equal(t, int16(0), d5.ErrorCode, "before v6 an unknown group is just Dead")
		assert.Equal(t, "Dead", d5.State)
		assert.Equal(t, []int16{code(kerr.IllegalGeneration), code(kerr.IllegalGeneration), code(kerr.IllegalGeneration)},
			a.commit("nope", 3, ida, 5), "a commit from a generation of a group that does not exist")
		assert.Equal(t, []int64{-1, -1, -1}, a.fetchOffsets("nope"))
	})
	t.Run("empty group id", func(t *testing.T) {
		assert.Equal(t, code(kerr.InvalidGroupID), a.join(joinOpts{group: ""}).ErrorCode)
		assert.Equal(t, code(kerr.InvalidGroupID), a.heartbeat("", 1, ida))
		assert.Equal(t, code(kerr.InvalidGroupID), a.sync("", 1, ida, nil).ErrorCode)
		assert.Equal(t, code(kerr.InvalidGroupID), a.leave("", ida).ErrorCode)
	})
	t.Run("session timeout out of range", func(t *testing.T) {
		assert.Equal(t, code(kerr.InvalidSessionTimeout), a.join(joinOpts{group: g, session: 500 * time.Millisecond}).ErrorCode)
		assert.Equal(t, code(kerr.InvalidSessionTimeout), a.join(joinOpts{group: g, session: 2 * time.Minute}).ErrorCode)
	})
	t.Run("protocols that do not match", func(t *testing.T) {
		assert.Equal(t, code(kerr.InconsistentGroupProtocol), a.join(joinOpts{group: g, protocolType: "connect"}).ErrorCode)
		assert.Equal(t, code(kerr.InconsistentGroupProtocol), a.join(joinOpts{group: g, protocols: []string{"roundrobin"}}).ErrorCode)
	})
	t.Run("wrong generation", func(t *testing.T) {
		assert.Equal(t, code(kerr.IllegalGeneration), a.heartbeat(g, 2, ida))
		assert.Equal(t, code(kerr.IllegalGeneration), a.sync(g, 7, ida, nil).ErrorCode)
		assert.Equal(t, code(kerr.IllegalGeneration), a.commit(g, 0, ida, 5)[0])
	})
	t.Run("unknown member id", func(t *testing.T) {
		assert.Equal(t, code(kerr.UnknownMemberID), a.heartbeat(g, 1, "nobody"))
		assert.Equal(t, code(kerr.UnknownMemberID), a.sync(g, 1, "nobody", nil).ErrorCode)
		assert.Equal(t, code(kerr.UnknownMemberID), a.join(joinOpts{group: g, member: "nobody"}).ErrorCode)
		assert.Equal(t, code(kerr.UnknownMemberID), a.commit(g, 1, "nobody", 5)[0])
	})
	// A commit by A: an unknown topic fails on its own partition only.
	assert.Equal(t, []int16{0, 0, code(kerr.UnknownTopicOrPartition)}, a.commit(g, 1, ida, 10))

	// B gets its member id, but syncs and heartbeats before joining with
	// it: it is not a member yet.
	jb := b.join(joinOpts{group: g})
	require.Equal(t, code(kerr.MemberIDRequired), jb.ErrorCode)
	idb := jb.MemberID
	t.Run("a SyncGroup before its JoinGroup", func(t *testing.T) {
		assert.Equal(t, code(kerr.UnknownMemberID), b.sync(g, 1, idb, nil).ErrorCode)
		assert.Equal(t, code(kerr.UnknownMemberID), b.heartbeat(g, 1, idb))
	})
	assert.Equal(t, int16(0), a.heartbeat(g, 1, ida), "A is still in a Stable group")

	// B joins with its id: a rebalance, which waits for A to rejoin.
	bDone := b.joinAsync(joinOpts{group: g, member: idb})
	require.Eventually(t, func() bool { return a.describe(5, g).State == "PreparingRebalance" }, 10*time.Second, 5*time.Millisecond)
	t.Run("heartbeats and syncs during a rebalance", func(t *testing.T) {
		assert.Equal(t, code(kerr.RebalanceInProgress), a.heartbeat(g, 1, ida))
		assert.Equal(t, code(kerr.RebalanceInProgress), a.sync(g, 1, ida, nil).ErrorCode)
		// A commit of the current generation is still accepted.
		assert.Equal(t, []int16{0, 0, code(kerr.UnknownTopicOrPartition)}, a.commit(g, 1, ida, 20))
	})
	notYet(t, bDone, "B's JoinGroup, with A not rejoined")
	aDone := a.joinAsync(joinOpts{group: g, member: ida})
	ja = received(t, a.ctx, aDone, "A's rejoin")
	jb = received(t, b.ctx, bDone, "B's join")
	require.Equal(t, int16(0), ja.ErrorCode)
	require.Equal(t, int16(0), jb.ErrorCode)
	require.Equal(t, int32(2), ja.Generation)
	require.Equal(t, int32(2), jb.Generation)
	assert.Equal(t, ida, jb.LeaderID, "the first member stays the leader")
	assert.Len(t, ja.Members, 2)
	assert.Empty(t, jb.Members, "only the leader gets the members")
	bSync := b.syncAsync(g, 2, idb, nil)
	notYet(t, bSync, "B's SyncGroup, before the leader's assignment")
	require.Equal(t, "a2", string(a.sync(g, 2, ida, map[string]string{ida: "a2", idb: "b2"}).MemberAssignment))
	assert.Equal(t, "b2", string(received(t, b.ctx, bSync, "B's sync").MemberAssignment))
	assert.Equal(t, int16(0), b.heartbeat(g, 2, idb))

	// B leaves; its id is dead from then on.
	lr := b.leave(g, idb)
	require.Equal(t, int16(0), lr.ErrorCode)
	require.Equal(t, int16(0), lr.Members[0].ErrorCode)
	t.Run("a heartbeat after LeaveGroup", func(t *testing.T) {
		assert.Equal(t, code(kerr.UnknownMemberID), b.heartbeat(g, 2, idb))
	})
	t.Run("a member id reused", func(t *testing.T) {
		assert.Equal(t, code(kerr.UnknownMemberID), b.join(joinOpts{group: g, member: idb}).ErrorCode)
		assert.Equal(t, code(kerr.UnknownMemberID), b.leave(g, idb).Members[0].ErrorCode)
		assert.Equal(t, code(kerr.UnknownMemberID), b.sync(g, 2, idb, nil).ErrorCode)
	})

	// The group is unharmed: A rebalances alone, syncs, heartbeats and
	// commits, and the offsets committed before are still there.
	assert.Equal(t, code(kerr.RebalanceInProgress), a.heartbeat(g, 2, ida), "B's leave started a rebalance")
	ja = a.join(joinOpts{group: g, member: ida})
	require.Equal(t, int16(0), ja.ErrorCode)
	require.Equal(t, int32(3), ja.Generation)
	require.Equal(t, "a3", string(a.sync(g, 3, ida, map[string]string{ida: "a3"}).MemberAssignment))
	assert.Equal(t, int16(0), a.heartbeat(g, 3, ida))
	assert.Equal(t, []int64{20, 20, -1}, a.fetchOffsets(g), "offsets survive the rebalances")
	assert.Equal(t, []int16{0, 0, code(kerr.UnknownTopicOrPartition)}, a.commit(g, 3, ida, 30))
	assert.Equal(t, []int64{30, 30, -1}, a.fetchOffsets(g))
	d := a.describe(5, g)
	assert.Equal(t, "Stable", d.State)
	assert.Equal(t, "range", d.Protocol)
	require.Len(t, d.Members, 1)
	assert.Equal(t, ida, d.Members[0].MemberID)
	assert.Equal(t, "a3", string(d.Members[0].MemberAssignment))
}

// The oldest versions librdkafka's feature check asks for still work:
// JoinGroup v0 (no member id round, one timeout), LeaveGroup v0 (one
// member, its error at the top), OffsetCommit and OffsetFetch v1, and the
// single-key FindCoordinator.
func TestKafkaGroupOldVersions(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Topics: []string{"t"}, Partitions: 2, Groups: GroupConfig{MinSessionTimeout: time.Second}}, kafkawire.Config{})
	a := newGroupAPI(t, kb, kgo.MaxVersions(kversion.V0_10_0()))

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "old"
	fresp, err := fc.RequestWith(a.ctx, a.br)
	require.NoError(t, err)
	assert.Equal(t, int16(0), fresp.ErrorCode)
	assert.Equal(t, int32(0), fresp.NodeID)

	j := a.join(joinOpts{group: "old"})
	require.Equal(t, int16(0), j.ErrorCode, "v0: no MEMBER_ID_REQUIRED round")
	require.NotEmpty(t, j.MemberID)
	require.Equal(t, int32(1), j.Generation)
	require.Equal(t, "x", string(a.sync("old", 1, j.MemberID, map[string]string{j.MemberID: "x"}).MemberAssignment))
	assert.Equal(t, []int16{0, 0, code(kerr.UnknownTopicOrPartition)}, a.commit("old", 1, j.MemberID, 7))
	assert.Equal(t, []int64{7, 7, -1}, func() []int64 {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = "old"
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = "t", []int32{0, 1, 2}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(a.ctx, a.br)
		require.NoError(t, err)
		var out []int64
		for _, p := range resp.Topics[0].Partitions {
			out = append(out, p.Offset)
		}
		return out
	}())

	leave := func(member string) int16 {
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Group, req.MemberID = "old", member
		resp, err := req.RequestWith(a.ctx, a.br)
		require.NoError(t, err)
		return resp.ErrorCode
	}
	assert.Equal(t, code(kerr.UnknownMemberID), leave("nobody"), "below v3 the member's error is the response's")
	assert.Equal(t, int16(0), leave(j.MemberID))
	assert.Equal(t, code(kerr.UnknownMemberID), a.heartbeat("old", 1, j.MemberID))
}

func code(e *kerr.Error) int16 { return e.Code }

// Shutting the broker down answers a parked JoinGroup (in a rebalance)
// and a parked SyncGroup (a follower's, waiting for the leader) with
// NOT_COORDINATOR before the connections close, long before their
// timeouts: the coordinator completes the groups' operations with
// CompleteForKey.
//
// The initial rebalance delay must outlast the follower's two-step join
// (MEMBER_ID_REQUIRED, then the join that parks) after its leader's: with
// 100 ms, a loaded machine (make test) let h's first generation form
// without the follower, whose sync of generation 1 was then refused at
// once.
func TestKafkaShutdownAnswersParkedGroupRequests(t *testing.T) {
	kb := startKafka(t, BrokerConfig{Topics: []string{"t"}, Partitions: 2, Groups: GroupConfig{
		InitialRebalanceDelay: 2 * time.Second, MinSessionTimeout: time.Second}}, kafkawire.Config{})
	a, b := newGroupAPI(t, kb), newGroupAPI(t, kb)
	// A forms the group alone; B's join starts a rebalance that waits for A.
	ida, done := a.joinNew(joinOpts{group: "g"})
	require.Equal(t, int16(0), received(t, a.ctx, done, "A's join").ErrorCode)
	require.Equal(t, int16(0), a.sync("g", 1, ida, map[string]string{ida: "x"}).ErrorCode)
	_, bJoin := b.joinNew(joinOpts{group: "g"})
	// In a second group, a follower's SyncGroup waits for its leader's.
	l, f := newGroupAPI(t, kb), newGroupAPI(t, kb)
	idl, lDone := l.joinNew(joinOpts{group: "h"})
	idf, fDone := f.joinNew(joinOpts{group: "h"})
	lJoin := received(t, l.ctx, lDone, "h's first join")
	require.Equal(t, int16(0), lJoin.ErrorCode)
	require.Equal(t, int16(0), received(t, f.ctx, fDone, "h's second join").ErrorCode)
	// The member whose parked JoinGroup reached the broker first leads;
	// on a loaded machine that may be f's. The other is the follower.
	if lJoin.LeaderID == idf {
		l, f, idf = f, l, idl
	}
	fSync := f.syncAsync("h", 1, idf, nil)
	require.Eventually(t, func() bool {
		st := kb.b.groups.Stats()
		return st.Join.Pending == 1 && st.Sync.Pending == 1
	}, 10*time.Second, 5*time.Millisecond, "g's rebalance and h's generation are parked")
	notYet(t, bJoin, "B's join")
	notYet(t, fSync, "h's follower's sync")

	start := time.Now()
	require.NoError(t, kb.stop())
	assert.Equal(t, code(kerr.NotCoordinator), received(t, b.ctx, bJoin, "B's join").ErrorCode)
	assert.Equal(t, code(kerr.NotCoordinator), received(t, f.ctx, fSync, "h's follower's sync").ErrorCode)
	assert.Less(t, time.Since(start), 5*time.Second, "not at the 10 s rebalance timeout")
	st := kb.b.groups.Stats()
	assert.Equal(t, uint64(1), st.Join.CompletedForKey)
	assert.Equal(t, uint64(1), st.Sync.CompletedForKey)
	assert.Equal(t, uint64(4), st.Heartbeat.CompletedForKey, "the four members' sessions")
}
