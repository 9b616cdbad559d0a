package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// The group coordinator: Kafka's classic consumer-group protocol
// (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and the offsets a group
// commits), ported from Kafka's GroupCoordinator.scala. Its three kinds of
// waiting are delayed operations in three purgatories, as in Kafka:
//
//   - DelayedJoin (delayed_group.go), one per rebalance, watched on the
//     group's GroupJoinKey: it completes when every known member has sent
//     its JoinGroup, or at the rebalance timeout, when the members that did
//     not rejoin are dropped. Its completion answers every parked JoinGroup.
//   - DelayedSync, one per generation, watched on GroupSyncKey: members
//     that have not sent their SyncGroup when it expires are dropped
//     (Kafka's pending-sync timeout). The SyncGroups themselves wait on
//     their member, as in Kafka, until the leader's assignment comes.
//   - DelayedHeartbeat, one per member, watched on its MemberKey: its
//     deadline is the end of the member's session. A heartbeat moves the
//     deadline with ResetTimeout; when it expires the member is dropped and
//     the group rebalances.
//
// One operation.SharedLock per group guards the group's state and is the
// lock of all its operations (Kafka's group.lock, passed as their lockOpt),
// so a callback always runs with the group locked, and a request handler
// that holds the lock may check or park the group's operations: the park
// finishes just before the lock is released, the check just after.
//
// Reply functions (joinReply, syncReply) are called exactly once per
// request, often from a callback under the group's lock: they must not
// block, and every path that forgets a waiting request must answer it
// first, or the client's connection would wait for that answer forever.

// errGroupUnloaded is the Cause of the operations Close completes with
// CompleteForKey: their callbacks answer what waits with NOT_COORDINATOR.
var errGroupUnloaded = errors.New("group coordinator: the broker is shutting down")

// GroupConfig configures the group coordinator. Zero durations take the
// default in brackets, Kafka's; InitialRebalanceDelay zero means none.
type GroupConfig struct {
	// InitialRebalanceDelay is Kafka's group.initial.rebalance.delay.ms:
	// the first rebalance of an empty group waits this long, and again as
	// long as new members keep coming (up to the rebalance timeout), so
	// that consumers starting together form one generation, not one per
	// arrival. Kafka's default is 3 s; zero starts at once.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the session timeouts
	// members may ask for (Kafka's group.min.session.timeout.ms and
	// group.max.session.timeout.ms) [6s, 30m].
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// Timer is the three purgatories' timer: a MockTimer in tests; nil for
	// real timers, each purgatory with its own reaper.
	Timer timer.Timer
	// Logger receives what the three purgatories report (a recovered
	// panic in a callback, a refused park); nil: slog.Default.
	Logger *slog.Logger
	// Repark keeps sessions alive Kafka's way: each heartbeat completes the
	// member's DelayedHeartbeat and parks a new one, instead of moving its
	// deadline with ResetTimeout. For BenchmarkHeartbeat.
	Repark bool
}

func (c *GroupConfig) setDefaults() {
	if c.MinSessionTimeout <= 0 {
		c.MinSessionTimeout = 6 * time.Second
	}
	if c.MaxSessionTimeout <= 0 {
		c.MaxSessionTimeout = 30 * time.Minute
	}
	c.InitialRebalanceDelay = max(c.InitialRebalanceDelay, 0)
}

type (
	joinKey   = operation.GroupJoinKey
	syncKey   = operation.GroupSyncKey
	memberKey = operation.MemberKey
)

// groupState is a group's place in Kafka's state machine:
//
//	Empty -> PreparingRebalance    a member joins
//	PreparingRebalance -> CompletingRebalance   the DelayedJoin completes with members
//	PreparingRebalance -> Empty    ... with none left
//	CompletingRebalance -> Stable  the leader's SyncGroup brings the assignment
//	CompletingRebalance, Stable -> PreparingRebalance   a member joins, leaves or expires
//	any -> Dead                    the broker shuts down
type groupState int8

const (
	groupEmpty groupState = iota
	groupPreparingRebalance
	groupCompletingRebalance
	groupStable
	groupDead
)

// String is the state's name as Kafka's ListGroups and DescribeGroups give it.
func (s groupState) String() string {
	switch s {
	case groupEmpty:
		return "Empty"
	case groupPreparingRebalance:
		return "PreparingRebalance"
	case groupCompletingRebalance:
		return "CompletingRebalance"
	case groupStable:
		return "Stable"
	}
	return "Dead"
}

// Coordinator is the group coordinator of this broker, which coordinates
// every group. Its methods are safe for concurrent use.
type Coordinator struct {
	cfg       GroupConfig
	join      *purgatory.Purgatory[joinKey, *DelayedJoin]
	sync      *purgatory.Purgatory[syncKey, *DelayedSync]
	heartbeat *purgatory.Purgatory[memberKey, *DelayedHeartbeat]

	// groups maps a group id to its *group. It is read without a lock on
	// every request (Kafka's groupManager keeps a ConcurrentHashMap too);
	// mu serialises creating a group with closing.
	groups sync.Map
	mu     sync.Mutex // never held while taking a group's lock
	closed atomic.Bool

	// onRemove, if set (by tests), is called under the group's lock each
	// time a member leaves the group, with the reason.
	onRemove func(g *group, m *member, why removal)
}

// removal is why a member left its group.
type removal int8

const (
	removedLeft          removal = iota // LeaveGroup
	removedSessionExpiry                // its heartbeats stopped
	removedNotRejoined                  // a rebalance completed without it
	removedNotSynced                    // its generation's sync timed out without it
)

// group is one consumer group. Every field after lock is guarded by it.
type group struct {
	id   string
	lock operation.SharedLock

	state        groupState
	generation   int32
	protocolType string // of its members; "" when it has none
	protocol     string // chosen for this generation; "" when Empty
	leader       string // member id; "" when it has no members
	members      map[string]*member
	// pending are member ids handed out with MEMBER_ID_REQUIRED (JoinGroup
	// v4+) whose JoinGroup has not come back yet, each with the heartbeat
	// that drops it after a session timeout. A rebalance waits for them.
	pending map[string]*DelayedHeartbeat
	// awaitingSync are the members of this generation that have not sent
	// their SyncGroup; the generation's DelayedSync drops them at expiry.
	awaitingSync map[string]bool
	// newMemberAdded says a member joined during the initial rebalance
	// delay, which then waits once more (Kafka's InitialDelayedJoin).
	newMemberAdded bool
	joinSeq        int64 // orders members by arrival: the leader is the first
	offsets        map[tpKey]committedOffset
}

// member is one member of a group, guarded by its group's lock.
type member struct {
	id, clientID, clientHost string
	session, rebalance       time.Duration
	protocolType             string
	protocols                []groupProtocol // in the member's order of preference
	assignment               []byte
	seq                      int64 // arrival order
	// joinReply is set while the member's JoinGroup waits for the
	// rebalance to complete, syncReply while its SyncGroup waits for the
	// leader's assignment (Kafka's awaitingJoinCallback and
	// awaitingSyncCallback).
	joinReply func(joinResult)
	syncReply func(syncResult)
	hb        *DelayedHeartbeat // its session; nil after it expired during a rebalance
}

// groupProtocol is one assignor a member supports (range, roundrobin,
// cooperative-sticky, ...) with the member's metadata for it.
type groupProtocol struct {
	name     string
	metadata []byte
}

type committedOffset struct {
	offset      int64
	leaderEpoch int32
	metadata    *string
}

// joinResult is the answer to a JoinGroup; members is set for the leader
// only: every member's metadata for the chosen protocol.
type joinResult struct {
	err                    *kerr.Error
	memberID               string
	generation             int32
	protocolType, protocol string
	leader                 string
	members                []joinedMember
}

type joinedMember struct {
	id       string
	metadata []byte
}

// syncResult is the answer to a SyncGroup: the member's assignment.
type syncResult struct {
	err                    *kerr.Error
	assignment             []byte
	protocolType, protocol string
}

// NewCoordinator returns a coordinator with its three purgatories.
func NewCoordinator(cfg GroupConfig) (*Coordinator, error) {
	cfg.setDefaults()
	opts := func() []purgatory.Option {
		var o []purgatory.Option
		if cfg.Logger != nil {
			o = append(o, purgatory.WithLogger(cfg.Logger))
		}
		if cfg.Timer != nil {
			o = append(o, purgatory.WithTimer(sharedTimer{cfg.Timer}), purgatory.WithoutReaper())
		}
		return o
	}
	c := &Coordinator{cfg: cfg}
	var err error
	if c.join, err = purgatory.New[joinKey, *DelayedJoin]("Rebalance", opts()...); err != nil {
		return nil, err
	}
	if c.sync, err = purgatory.New[syncKey, *DelayedSync]("PendingSync", opts()...); err != nil {
		_ = c.join.Shutdown(context.Background())
		return nil, err
	}
	if c.heartbeat, err = purgatory.New[memberKey, *DelayedHeartbeat]("Heartbeat", opts()...); err != nil {
		_ = c.join.Shutdown(context.Background())
		_ = c.sync.Shutdown(context.Background())
		return nil, err
	}
	return c, nil
}

// lookup returns the group id, creating it if create is set. It returns
// kerr.CoordinatorNotAvailable once the coordinator is closed, and a nil
// group without error if the group does not exist.
//
// A request that finds its group just before Close unloads it finds it
// Dead once it has the group's lock.
func (c *Coordinator) lookup(id string, create bool) (*group, *kerr.Error) {
	if c.closed.Load() {
		return nil, kerr.CoordinatorNotAvailable
	}
	if v, ok := c.groups.Load(id); ok {
		return v.(*group), nil
	}
	if !create {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, kerr.CoordinatorNotAvailable
	}
	v, _ := c.groups.LoadOrStore(id, &group{id: id, members: make(map[string]*member), pending: make(map[string]*DelayedHeartbeat),
		awaitingSync: make(map[string]bool), offsets: make(map[tpKey]committedOffset)})
	return v.(*group), nil
}

// all returns every group, in id order.
func (c *Coordinator) all() []*group {
	var gs []*group
	c.groups.Range(func(_, v any) bool {
		gs = append(gs, v.(*group))
		return true
	})
	slices.SortFunc(gs, func(a, b *group) int { return cmp.Compare(a.id, b.id) })
	return gs
}

// JoinRequest is a JoinGroup, version independent.
type JoinRequest struct {
	Group, MemberID      string
	ClientID, ClientHost string
	ProtocolType         string
	Protocols            []groupProtocol
	Session, Rebalance   time.Duration
	RequireKnownMemberID bool // v4+: a new member first gets its id with MEMBER_ID_REQUIRED
}

// Join handles a JoinGroup (Kafka's handleJoinGroup): reply is called once,
// at once or when the rebalance completes, possibly under the group's lock.
func (c *Coordinator) Join(r JoinRequest, reply func(joinResult)) {
	fail := func(e *kerr.Error) { reply(joinResult{err: e, memberID: r.MemberID, generation: -1}) }
	switch {
	case r.Group == "":
		fail(kerr.InvalidGroupID)
		return
	case r.Session < c.cfg.MinSessionTimeout || r.Session > c.cfg.MaxSessionTimeout:
		fail(kerr.InvalidSessionTimeout)
		return
	}
	// A known member id for a group that does not exist: the group is gone
	// (or never was), so the member must start over.
	g, e := c.lookup(r.Group, r.MemberID == "")
	if e != nil {
		fail(e)
		return
	}
	if g == nil {
		fail(kerr.UnknownMemberID)
		return
	}
	g.lock.Lock()
	defer g.lock.Unlock()
	switch {
	case g.state == groupDead:
		fail(kerr.CoordinatorNotAvailable)
		return
	case !g.supports(r.ProtocolType, r.Protocols):
		fail(kerr.InconsistentGroupProtocol)
		return
	}
	if r.MemberID == "" {
		id := r.ClientID + "-" + rand.Text()
		if r.RequireKnownMemberID {
			// KIP-394: the member gets its id first and joins with it, so
			// that a client whose JoinGroup times out retries as the same
			// member instead of leaving a stranger in the group. Until it
			// does, the rebalance waits for it, for a session at most.
			hb := c.newHeartbeat(g, id, true, r.Session)
			g.pending[id] = hb
			c.parkHeartbeat(hb)
			reply(joinResult{err: kerr.MemberIDRequired, memberID: id, generation: -1})
			return
		}
		c.addMemberAndRebalance(g, id, r, reply)
	} else if hb, ok := g.pending[r.MemberID]; ok {
		delete(g.pending, r.MemberID)
		hb.ForceComplete()
		c.addMemberAndRebalance(g, r.MemberID, r, reply)
	} else if m := g.members[r.MemberID]; m == nil {
		fail(kerr.UnknownMemberID)
		return
	} else {
		c.rejoinLocked(g, m, r, reply)
	}
	if g.state == groupPreparingRebalance {
		// Noted now, checked when the lock is released.
		c.join.CheckAndComplete(joinKey{GroupID: g.id})
	}
}

// rejoinLocked is a JoinGroup from a current member (Kafka's
// doCurrentMemberJoinGroup).
func (c *Coordinator) rejoinLocked(g *group, m *member, r JoinRequest, reply func(joinResult)) {
	// A JoinGroup proves the member alive as a heartbeat does. (While it
	// waits in the rebalance its session's expiry keeps it anyway.)
	c.touch(g, m)
	switch g.state {
	case groupPreparingRebalance:
		c.updateMemberAndRebalance(g, m, r, reply)
	case groupCompletingRebalance:
		if m.sameProtocols(r.Protocols) {
			// Its JoinGroup answer was lost on the way: send it again.
			reply(g.joinResultFor(m))
			return
		}
		c.updateMemberAndRebalance(g, m, r, reply)
	case groupStable:
		if m.id == g.leader || !m.sameProtocols(r.Protocols) {
			// The leader rejoining asks for a new assignment (say, its
			// subscription changed): rebalance.
			c.updateMemberAndRebalance(g, m, r, reply)
			return
		}
		// A follower with nothing new: tell it the current generation,
		// so that it syncs again.
		res := g.joinResultFor(m)
		res.members = nil
		reply(res)
	default: // Empty or Dead: a member here is a contradiction; make it start over
		reply(joinResult{err: kerr.UnknownMemberID, memberID: m.id, generation: -1})
	}
}

// supports says whether a member with these protocols may join: the
// group's first member sets the protocol type, and every member must
// share at least one protocol with all the others.
func (g *group) supports(protocolType string, protocols []groupProtocol) bool {
	if protocolType == "" || len(protocols) == 0 {
		return false
	}
	if len(g.members) == 0 {
		return true
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protocols {
		if g.allSupport(p.name) {
			return true
		}
	}
	return false
}

func (g *group) allSupport(name string) bool {
	for _, m := range g.members {
		if !slices.ContainsFunc(m.protocols, func(p groupProtocol) bool { return p.name == name }) {
			return false
		}
	}
	return true
}

func (m *member) sameProtocols(ps []groupProtocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b groupProtocol) bool {
		return a.name == b.name && string(a.metadata) == string(b.metadata)
	})
}

// selectProtocol picks the generation's protocol as Kafka does: among the
// protocols every member supports, each member votes for the one it
// prefers most, and the most votes win. A tie goes to the one the leader
// prefers, so that the answer does not depend on map order.
func (g *group) selectProtocol() string {
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.allSupport(p.name) {
				votes[p.name]++
				break
			}
		}
	}
	best, bestVotes := "", -1
	if l := g.members[g.leader]; l != nil {
		for _, p := range l.protocols {
			if n, ok := votes[p.name]; ok && n > bestVotes {
				best, bestVotes = p.name, n
			}
		}
	}
	return best
}

// sortedMembers lists the members in arrival order.
func (g *group) sortedMembers() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b *member) int { return cmp.Compare(a.seq, b.seq) })
	return ms
}

// joinResultFor is m's answer for the current generation; the leader's
// carries every member's metadata for the chosen protocol.
func (g *group) joinResultFor(m *member) joinResult {
	res := joinResult{memberID: m.id, generation: g.generation, protocolType: g.protocolType,
		protocol: g.protocol, leader: g.leader}
	if m.id == g.leader {
		for _, o := range g.sortedMembers() {
			jm := joinedMember{id: o.id}
			for _, p := range o.protocols {
				if p.name == g.protocol {
					jm.metadata = p.metadata
					break
				}
			}
			res.members = append(res.members, jm)
		}
	}
	return res
}

func (g *group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalance)
	}
	return d
}

// addMemberAndRebalance adds a new member whose JoinGroup waits for the
// rebalance, and starts its session.
func (c *Coordinator) addMemberAndRebalance(g *group, id string, r JoinRequest, reply func(joinResult)) {
	g.joinSeq++
	m := &member{id: id, clientID: r.ClientID, clientHost: r.ClientHost, session: r.Session, rebalance: r.Rebalance,
		protocolType: r.ProtocolType, protocols: r.Protocols, seq: g.joinSeq, joinReply: reply}
	if g.state == groupPreparingRebalance && g.generation == 0 {
		g.newMemberAdded = true
	}
	if len(g.members) == 0 {
		g.protocolType = r.ProtocolType
	}
	g.members[id] = m
	if g.leader == "" {
		g.leader = id
	}
	m.hb = c.newHeartbeat(g, id, false, m.session)
	c.parkHeartbeat(m.hb)
	c.maybePrepareRebalance(g)
}

func (c *Coordinator) updateMemberAndRebalance(g *group, m *member, r JoinRequest, reply func(joinResult)) {
	m.protocols, m.session, m.rebalance = r.Protocols, r.Session, r.Rebalance
	if m.joinReply != nil {
		// The same member joining twice in one rebalance (its first
		// JoinGroup timed out on the client's side): the older request
		// still needs an answer for its connection to move on.
		m.joinReply(joinResult{err: kerr.RebalanceInProgress, memberID: m.id, generation: -1})
	}
	m.joinReply = reply
	c.maybePrepareRebalance(g)
}

func (c *Coordinator) maybePrepareRebalance(g *group) {
	switch g.state {
	case groupStable, groupCompletingRebalance, groupEmpty:
		c.prepareRebalance(g)
	}
}

// prepareRebalance moves g to PreparingRebalance and parks the DelayedJoin
// that completes the rebalance. The caller holds g's lock (the handler's,
// or the callback's): the park finishes just before it is released.
func (c *Coordinator) prepareRebalance(g *group) {
	if g.state == groupCompletingRebalance {
		// Members waiting for their assignment must rejoin instead.
		for _, m := range g.members {
			m.assignment = nil
			if m.syncReply != nil {
				reply := m.syncReply
				m.syncReply = nil
				reply(syncResult{err: kerr.RebalanceInProgress})
			}
		}
	}
	clear(g.awaitingSync)
	var dj *DelayedJoin
	if g.state == groupEmpty && c.cfg.InitialRebalanceDelay > 0 {
		delay := c.cfg.InitialRebalanceDelay
		dj = c.newDelayedJoin(g, delay, true, max(g.rebalanceTimeout()-delay, 0))
	} else {
		dj = c.newDelayedJoin(g, g.rebalanceTimeout(), false, 0)
	}
	g.state = groupPreparingRebalance
	// The generation's DelayedSync has nothing left to wait for.
	c.sync.CheckAndComplete(syncKey{GroupID: g.id})
	c.parkJoin(dj)
}

// removeMemberLocked drops m from g (Kafka's removeMemberAndUpdateGroup):
// its waiting requests are answered UNKNOWN_MEMBER_ID, its session ends,
// and the group rebalances without it.
func (c *Coordinator) removeMemberLocked(g *group, m *member, why removal) {
	c.dropMemberLocked(g, m, why)
	switch g.state {
	case groupStable, groupCompletingRebalance:
		c.maybePrepareRebalance(g)
	case groupPreparingRebalance:
		c.join.CheckAndComplete(joinKey{GroupID: g.id})
	}
}

// dropMemberLocked takes m out of g without starting a rebalance.
func (c *Coordinator) dropMemberLocked(g *group, m *member, why removal) {
	if m.joinReply != nil {
		reply := m.joinReply
		m.joinReply = nil
		reply(joinResult{err: kerr.UnknownMemberID, generation: -1})
	}
	if m.syncReply != nil {
		reply := m.syncReply
		m.syncReply = nil
		reply(syncResult{err: kerr.UnknownMemberID})
	}
	delete(g.members, m.id)
	delete(g.awaitingSync, m.id)
	if hb := m.hb; hb != nil {
		m.hb = nil
		hb.ForceComplete() // under g's lock, which its callbacks expect
	}
	if g.leader == m.id {
		g.leader = ""
		if ms := g.sortedMembers(); len(ms) > 0 {
			g.leader = ms[0].id
		}
	}
	if len(g.members) == 0 {
		g.protocolType = ""
	}
	if c.onRemove != nil {
		c.onRemove(g, m, why)
	}
}

// completeJoinLocked completes a rebalance (Kafka's onCompleteJoin):
// members that did not rejoin are dropped, the next generation begins, and
// every waiting JoinGroup is answered.
func (c *Coordinator) completeJoinLocked(g *group) {
	if g.state != groupPreparingRebalance {
		return // Dead: answered by the unload
	}
	for _, m := range g.sortedMembers() {
		if m.joinReply == nil {
			c.dropMemberLocked(g, m, removedNotRejoined)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.protocol, g.state = "", groupEmpty
		return
	}
	g.protocol = g.selectProtocol()
	g.state = groupCompletingRebalance
	for _, m := range g.sortedMembers() {
		reply := m.joinReply
		m.joinReply = nil
		reply(g.joinResultFor(m))
		// Its session restarts now: while the JoinGroup waited, the
		// client could not heartbeat.
		c.touch(g, m)
		g.awaitingSync[m.id] = true
	}
	c.parkSync(c.newDelayedSync(g, g.generation, g.rebalanceTimeout()))
}

// touch restarts m's session, which a heartbeat, a JoinGroup or a
// SyncGroup of it proves alive.
func (c *Coordinator) touch(g *group, m *member) {
	if m.hb != nil {
		switch {
		case !m.hb.tried:
			// Parked under this lock, and not yet in the purgatory (as
			// when a member's first JoinGroup completes the rebalance): its
			// park, finished as the lock is released, gives it a whole
			// session.
			return
		case c.cfg.Repark:
			// Kafka's way: complete the operation and park a new one.
			m.hb.ForceComplete()
		case c.heartbeat.ResetTimeout(m.hb, m.session):
			return
		}
	}
	// Its heartbeat expired while it waited in a rebalance (which keeps a
	// member), or Repark: a new session.
	m.hb = c.newHeartbeat(g, m.id, false, m.session)
	c.parkHeartbeat(m.hb)
}

// onHeartbeatExpired ends a session (Kafka's onExpireHeartbeat). A member
// waiting in a rebalance is kept: its client cannot heartbeat while its
// JoinGroup or SyncGroup is parked, and the rebalance's own timeouts bound
// the wait; its session restarts when it is answered.
func (c *Coordinator) onHeartbeatExpired(g *group, hb *DelayedHeartbeat) {
	if g.state == groupDead {
		return
	}
	if hb.pending {
		if g.pending[hb.memberID] == hb {
			delete(g.pending, hb.memberID)
			if g.state == groupPreparingRebalance {
				c.join.CheckAndComplete(joinKey{GroupID: g.id})
			}
		}
		return
	}
	m := g.members[hb.memberID]
	if m == nil || m.hb != hb {
		return
	}
	m.hb = nil
	if m.joinReply != nil || m.syncReply != nil {
		return
	}
	c.removeMemberLocked(g, m, removedSessionExpiry)
}

// onSyncExpired drops the members of generation that never sent their
// SyncGroup (Kafka's onExpirePendingSync), and rebalances without them.
func (c *Coordinator) onSyncExpired(g *group, generation int32) {
	if g.generation != generation || (g.state != groupCompletingRebalance && g.state != groupStable) {
		return
	}
	for _, m := range g.sortedMembers() {
		if g.awaitingSync[m.id] {
			c.removeMemberLocked(g, m, removedNotSynced)
		}
	}
}

// Sync handles a SyncGroup (Kafka's handleSyncGroup). protocolType and
// protocol are nil below v5. reply may be called later, under the lock.
func (c *Coordinator) Sync(groupID string, generation int32, memberID string, protocolType, protocol *string,
	assignments map[string][]byte, reply func(syncResult)) {
	if groupID == "" {
		reply(syncResult{err: kerr.InvalidGroupID})
		return
	}
	g, e := c.lookup(groupID, false)
	if e != nil {
		reply(syncResult{err: e})
		return
	}
	if g == nil {
		reply(syncResult{err: kerr.UnknownMemberID})
		return
	}
	g.lock.Lock()
	defer g.lock.Unlock()
	m := g.members[memberID]
	switch {
	case g.state == groupDead:
		reply(syncResult{err: kerr.CoordinatorNotAvailable})
		return
	case m == nil:
		reply(syncResult{err: kerr.UnknownMemberID})
		return
	case generation != g.generation:
		reply(syncResult{err: kerr.IllegalGeneration})
		return
	case protocolType != nil && *protocolType != g.protocolType, protocol != nil && *protocol != g.protocol:
		reply(syncResult{err: kerr.InconsistentGroupProtocol})
		return
	}
	switch g.state {
	case groupPreparingRebalance:
		reply(syncResult{err: kerr.RebalanceInProgress})
	case groupCompletingRebalance:
		if m.syncReply != nil { // a second SyncGroup while the first waits
			m.syncReply(syncResult{err: kerr.RebalanceInProgress})
		}
		m.syncReply = reply
		delete(g.awaitingSync, m.id)
		c.sync.CheckAndComplete(syncKey{GroupID: g.id})
		if m.id == g.leader {
			for _, o := range g.members {
				o.assignment = assignments[o.id] // a member the leader left out gets nothing
			}
			g.state = groupStable
			for _, o := range g.sortedMembers() {
				if o.syncReply != nil {
					r := o.syncReply
					o.syncReply = nil
					r(syncResult{assignment: o.assignment, protocolType: g.protocolType, protocol: g.protocol})
					c.touch(g, o)
				}
			}
		}
	case groupStable:
		delete(g.awaitingSync, m.id)
		c.sync.CheckAndComplete(syncKey{GroupID: g.id})
		reply(syncResult{assignment: m.assignment, protocolType: g.protocolType, protocol: g.protocol})
		c.touch(g, m)
	default: // Empty: no members, so not reached
		reply(syncResult{err: kerr.UnknownMemberID})
	}
}

// Heartbeat handles a Heartbeat (Kafka's handleHeartbeat): it restarts the
// member's session, and tells it whether to rejoin.
func (c *Coordinator) Heartbeat(groupID string, generation int32, memberID string) *kerr.Error {
	if groupID == "" {
		return kerr.InvalidGroupID
	}
	g, e := c.lookup(groupID, false)
	if e != nil {
		return e
	}
	if g == nil {
		return kerr.UnknownMemberID
	}
	g.lock.Lock()
	defer g.lock.Unlock()
	m := g.members[memberID]
	switch {
	case g.state == groupDead:
		return kerr.CoordinatorNotAvailable
	case m == nil:
		return kerr.UnknownMemberID
	case generation != g.generation:
		return kerr.IllegalGeneration
	}
	switch g.state {
	case groupPreparingRebalance:
		c.touch(g, m)
		return kerr.RebalanceInProgress
	case groupCompletingRebalance, groupStable:
		// A client may heartbeat between its JoinGroup answer and its
		// SyncGroup; that keeps it alive like any other heartbeat.
		c.touch(g, m)
		return nil
	}
	return kerr.UnknownMemberID
}

// Leave handles a LeaveGroup (Kafka's handleLeaveGroup) for each member
// id: the top-level error, and one per member.
func (c *Coordinator) Leave(groupID string, memberIDs []string) (*kerr.Error, []*kerr.Error) {
	errs := make([]*kerr.Error, len(memberIDs))
	if groupID == "" {
		return kerr.InvalidGroupID, errs
	}
	g, e := c.lookup(groupID, false)
	if e != nil {
		return e, errs
	}
	if g == nil {
		for i := range errs {
			errs[i] = kerr.UnknownMemberID
		}
		return nil, errs
	}
	g.lock.Lock()
	defer g.lock.Unlock()
	if g.state == groupDead {
		return kerr.CoordinatorNotAvailable, errs
	}
	for i, id := range memberIDs {
		if hb, ok := g.pending[id]; ok {
			delete(g.pending, id)
			hb.ForceComplete()
			if g.state == groupPreparingRebalance {
				c.join.CheckAndComplete(joinKey{GroupID: g.id})
			}
			continue
		}
		m := g.members[id]
		if m == nil {
			errs[i] = kerr.UnknownMemberID
			continue
		}
		c.removeMemberLocked(g, m, removedLeft)
	}
	return nil, errs
}

// OffsetCommit is one partition's part of an OffsetCommit.
type OffsetCommit struct {
	TP          tpKey
	Offset      int64
	LeaderEpoch int32
	Metadata    *string
}

// maxOffsetMetadata is Kafka's offset.metadata.max.bytes.
const maxOffsetMetadata = 4096

// CommitOffsets stores a group's offsets (Kafka's handleCommitOffsets):
// one error per partition. A generation below zero commits for a group
// that does not use the coordinator for membership (a consumer assigning
// its own partitions), allowed while the group has no members.
func (c *Coordinator) CommitOffsets(b *Broker, groupID string, generation int32, memberID string, commits []OffsetCommit) []*kerr.Error {
	errs := make([]*kerr.Error, len(commits))
	all := func(e *kerr.Error) []*kerr.Error {
		for i := range errs {
			errs[i] = e
		}
		return errs
	}
	g, e := c.lookup(groupID, generation < 0)
	if e != nil {
		return all(e)
	}
	if g == nil {
		return all(kerr.IllegalGeneration) // a commit from a generation of a group that is gone
	}
	g.lock.Lock()
	defer g.lock.Unlock()
	m := g.members[memberID]
	switch {
	case g.state == groupDead:
		return all(kerr.CoordinatorNotAvailable)
	case generation < 0 && g.state == groupEmpty:
	case m == nil:
		return all(kerr.UnknownMemberID)
	case generation != g.generation:
		return all(kerr.IllegalGeneration)
	case g.state == groupCompletingRebalance:
		// The member has its generation but not yet its assignment.
		return all(kerr.RebalanceInProgress)
	default: // Stable or PreparingRebalance: a commit during a rebalance
		// is allowed; the heartbeat tells the member to rejoin.
		c.touch(g, m)
	}
	for i, oc := range commits {
		switch {
		case b.partitions[oc.TP] == nil:
			errs[i] = kerr.UnknownTopicOrPartition
		case oc.Metadata != nil && len(*oc.Metadata) > maxOffsetMetadata:
			errs[i] = kerr.OffsetMetadataTooLarge
		default:
			g.offsets[oc.TP] = committedOffset{offset: oc.Offset, leaderEpoch: oc.LeaderEpoch, metadata: oc.Metadata}
		}
	}
	return errs
}

// FetchedOffset is a committed offset; Offset is -1 if there is none.
type FetchedOffset struct {
	TP          tpKey
	Offset      int64
	LeaderEpoch int32
	Metadata    *string
}

// FetchOffsets returns a group's committed offsets for tps, or all of
// them if tps is nil. As in Kafka it does not check membership: a group
// may only store offsets here.
func (c *Coordinator) FetchOffsets(groupID string, tps []tpKey) ([]FetchedOffset, *kerr.Error) {
	g, e := c.lookup(groupID, false)
	if e != nil {
		return nil, e
	}
	var out []FetchedOffset
	if g == nil {
		for _, tp := range tps {
			out = append(out, FetchedOffset{TP: tp, Offset: -1, LeaderEpoch: -1})
		}
		return out, nil
	}
	g.lock.Lock()
	defer g.lock.Unlock()
	if g.state == groupDead {
		return nil, kerr.CoordinatorNotAvailable
	}
	if tps == nil {
		for tp := range g.offsets {
			tps = append(tps, tp)
		}
		slices.SortFunc(tps, func(a, b tpKey) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
	}
	for _, tp := range tps {
		fo := FetchedOffset{TP: tp, Offset: -1, LeaderEpoch: -1}
		if co, ok := g.offsets[tp]; ok {
			fo.Offset, fo.LeaderEpoch, fo.Metadata = co.offset, co.leaderEpoch, co.metadata
		}
		out = append(out, fo)
	}
	return out, nil
}

// GroupSummary is what ListGroups and DescribeGroups tell of a group.
type GroupSummary struct {
	ID, State, ProtocolType, Protocol string
	Members                           []MemberSummary
}

// MemberSummary is one member as DescribeGroups shows it; its metadata and
// assignment only while the group is Stable, as in Kafka.
type MemberSummary struct {
	ID, ClientID, ClientHost string
	Metadata, Assignment     []byte
}

// ListGroups summarises every group, members left out.
func (c *Coordinator) ListGroups() ([]GroupSummary, *kerr.Error) {
	if c.closed.Load() {
		return nil, kerr.CoordinatorNotAvailable
	}
	gs := c.all()
	out := make([]GroupSummary, 0, len(gs))
	for _, g := range gs {
		g.lock.Lock()
		out = append(out, GroupSummary{ID: g.id, State: g.state.String(), ProtocolType: g.protocolType})
		g.lock.Unlock()
	}
	return out, nil
}

// DescribeGroup summarises a group with its members. An unknown group is
// reported Dead with ok false.
func (c *Coordinator) DescribeGroup(id string) (s GroupSummary, ok bool, e *kerr.Error) {
	g, e := c.lookup(id, false)
	if e != nil || g == nil {
		return GroupSummary{ID: id, State: groupDead.String()}, false, e
	}
	g.lock.Lock()
	defer g.lock.Unlock()
	s = GroupSummary{ID: id, State: g.state.String(), ProtocolType: g.protocolType}
	stable := g.state == groupStable
	if stable {
		s.Protocol = g.protocol
	}
	for _, m := range g.sortedMembers() {
		ms := MemberSummary{ID: m.id, ClientID: m.clientID, ClientHost: m.clientHost}
		if stable {
			for _, p := range m.protocols {
				if p.name == g.protocol {
					ms.Metadata = p.metadata
				}
			}
			ms.Assignment = m.assignment
		}
		s.Members = append(s.Members, ms)
	}
	return s, true, nil
}

// GroupStats are the coordinator's figures for the status line.
type GroupStats struct {
	Groups, Members int
	// Join, Sync and Heartbeat are the three purgatories' counters:
	// rebalances in progress, generations waiting for SyncGroups, and
	// sessions (one parked per member).
	Join, Sync, Heartbeat purgatory.Stats
}

// Stats counts the groups and their members, and reads the purgatories.
func (c *Coordinator) Stats() GroupStats {
	st := GroupStats{Join: c.join.Stats(), Sync: c.sync.Stats(), Heartbeat: c.heartbeat.Stats()}
	for _, g := range c.all() {
		g.lock.Lock()
		st.Groups++
		st.Members += len(g.members)
		g.lock.Unlock()
	}
	return st
}

// Close unloads every group, as Kafka does when the broker gives up its
// coordinator role: each group's parked requests are answered now, with
// NOT_COORDINATOR, by CompleteForKey on the group's keys, rather than left
// to their timeouts, and requests from then on get COORDINATOR_NOT_AVAILABLE.
// Then it shuts the purgatories down.
func (c *Coordinator) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return nil
	}
	c.closed.Store(true) // under mu: no group is created after this
	c.mu.Unlock()
	for _, g := range c.all() {
		c.unload(g)
	}
	return errors.Join(c.join.Shutdown(ctx), c.sync.Shutdown(ctx), c.heartbeat.Shutdown(ctx))
}

// unload marks g Dead and completes its operations with errGroupUnloaded:
// the DelayedJoin answers the parked JoinGroups, the DelayedSync the
// parked SyncGroups, and the heartbeats just end. CompleteForKey takes no
// lock, so it runs here under g's, which the callbacks expect to hold.
func (c *Coordinator) unload(g *group) {
	g.lock.Lock()
	defer g.lock.Unlock()
	g.state = groupDead
	c.join.CompleteForKey(joinKey{GroupID: g.id}, errGroupUnloaded)
	c.sync.CompleteForKey(syncKey{GroupID: g.id}, errGroupUnloaded)
	for id := range g.pending {
		c.heartbeat.CompleteForKey(memberKey{GroupID: g.id, MemberID: id}, errGroupUnloaded)
	}
	for id, m := range g.members {
		c.heartbeat.CompleteForKey(memberKey{GroupID: g.id, MemberID: id}, errGroupUnloaded)
		m.hb = nil
	}
	clear(g.pending)
	// Every parked request was on one of those operations: a JoinGroup
	// only waits in PreparingRebalance, with its DelayedJoin parked, and a
	// SyncGroup only in CompletingRebalance, with its DelayedSync. This
	// sweep answers what a broken invariant would leave hanging.
	for _, m := range g.members {
		answerUnloaded(m)
	}
}

// answerUnloaded answers m's waiting requests: the group moved away.
func answerUnloaded(m *member) {
	if m.joinReply != nil {
		r := m.joinReply
		m.joinReply = nil
		r(joinResult{err: kerr.NotCoordinator, memberID: m.id, generation: -1})
	}
	if m.syncReply != nil {
		r := m.syncReply
		m.syncReply = nil
		r(syncResult{err: kerr.NotCoordinator})
	}
}
