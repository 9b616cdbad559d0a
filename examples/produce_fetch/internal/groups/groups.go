package groups

import (
	"cmp"
	"context"
	"crypto/rand"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/purgatory-go/purgatory/operation"
)

// Config configures the group coordinator. Zero durations take the
// default in brackets, Kafka's; InitialRebalanceDelay zero means none.
type Config struct {
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
	// OnRemove, if set (by tests), is called under the group's lock each
	// time a member leaves a group, with the reason.
	OnRemove func(group string, m MemberSummary, why Removal)
}

func (c *Config) setDefaults() {
	if c.MinSessionTimeout <= 0 {
		c.MinSessionTimeout = 6 * time.Second
	}
	if c.MaxSessionTimeout <= 0 {
		c.MaxSessionTimeout = 30 * time.Minute
	}
	c.InitialRebalanceDelay = max(c.InitialRebalanceDelay, 0)
}

type tpKey = operation.TopicPartitionKey

// groupState is a group's place in Kafka's state machine:
//
//	Empty -> PreparingRebalance    a member joins
//	PreparingRebalance -> CompletingRebalance   the rebalance's wait completes with members
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
	cfg   Config
	waits Waits

	// groups maps a group id to its *Group. It is read without a lock on
	// every request (Kafka's groupManager keeps a ConcurrentHashMap too);
	// mu serialises creating a group with closing.
	groups sync.Map
	mu     sync.Mutex // never held while taking a group's lock
	closed atomic.Bool
}

// Removal is why a member left its group.
type Removal int8

// The reasons a member leaves its group.
const (
	RemovedLeft          Removal = iota // LeaveGroup
	RemovedSessionExpiry                // its heartbeats stopped
	RemovedNotRejoined                  // a rebalance completed without it
	RemovedNotSynced                    // its generation's sync timed out without it
)

// Group is one consumer group. Every field after lock is guarded by it;
// its methods are called with the lock held.
type Group struct {
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
	pending map[string]Session
	// awaitingSync are the members of this generation that have not sent
	// their SyncGroup; the generation's sync wait drops them at expiry.
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
	protocols                []Protocol // in the member's order of preference
	assignment               []byte
	seq                      int64 // arrival order
	// joinReply is set while the member's JoinGroup waits for the
	// rebalance to complete, syncReply while its SyncGroup waits for the
	// leader's assignment (Kafka's awaitingJoinCallback and
	// awaitingSyncCallback).
	joinReply func(JoinResult)
	syncReply func(SyncResult)
	hb        Session // its session; nil after it expired during a rebalance
}

// Protocol is one assignor a member supports (range, roundrobin,
// cooperative-sticky, ...) with the member's metadata for it.
type Protocol struct {
	Name     string
	Metadata []byte
}

type committedOffset struct {
	offset      int64
	leaderEpoch int32
	metadata    *string
}

// JoinResult is the answer to a JoinGroup; Members is set for the leader
// only: every member's metadata for the chosen protocol.
type JoinResult struct {
	Err                    *kerr.Error // nil: NONE
	MemberID               string
	Generation             int32
	ProtocolType, Protocol string
	Leader                 string
	Members                []JoinedMember
}

// JoinedMember is one member as the leader's JoinResult lists it.
type JoinedMember struct {
	ID       string
	Metadata []byte
}

// SyncResult is the answer to a SyncGroup: the member's assignment.
type SyncResult struct {
	Err                    *kerr.Error // nil: NONE
	Assignment             []byte
	ProtocolType, Protocol string
}

// New returns a coordinator that parks its waits with waits. It calls no
// method of waits before it returns, so waits may be the value that holds
// the coordinator.
func New(cfg Config, waits Waits) *Coordinator {
	cfg.setDefaults()
	return &Coordinator{cfg: cfg, waits: waits}
}

// lookup returns the group id, creating it if create is set. It returns
// kerr.CoordinatorNotAvailable once the coordinator is closed, and a nil
// group without error if the group does not exist.
//
// A request that finds its group just before Close unloads it finds it
// Dead once it has the group's lock.
func (c *Coordinator) lookup(id string, create bool) (*Group, *kerr.Error) {
	if c.closed.Load() {
		return nil, kerr.CoordinatorNotAvailable
	}
	if v, ok := c.groups.Load(id); ok {
		return v.(*Group), nil
	}
	if !create {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, kerr.CoordinatorNotAvailable
	}
	v, _ := c.groups.LoadOrStore(id, &Group{id: id, members: make(map[string]*member), pending: make(map[string]Session),
		awaitingSync: make(map[string]bool), offsets: make(map[tpKey]committedOffset)})
	return v.(*Group), nil
}

// all returns every group, in id order.
func (c *Coordinator) all() []*Group {
	var gs []*Group
	c.groups.Range(func(_, v any) bool {
		gs = append(gs, v.(*Group))
		return true
	})
	slices.SortFunc(gs, func(a, b *Group) int { return cmp.Compare(a.id, b.id) })
	return gs
}

// JoinRequest is a JoinGroup, version independent.
type JoinRequest struct {
	Group, MemberID      string
	ClientID, ClientHost string
	ProtocolType         string
	Protocols            []Protocol
	Session, Rebalance   time.Duration
	RequireKnownMemberID bool // v4+: a new member first gets its id with MEMBER_ID_REQUIRED
}

// Join handles a JoinGroup (Kafka's handleJoinGroup): reply is called once,
// at once or when the rebalance completes, possibly under the group's lock.
func (c *Coordinator) Join(r JoinRequest, reply func(JoinResult)) {
	fail := func(e *kerr.Error) { reply(JoinResult{Err: e, MemberID: r.MemberID, Generation: -1}) }
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
			g.pending[id] = c.waits.StartSession(g, id, true, r.Session)
			reply(JoinResult{Err: kerr.MemberIDRequired, MemberID: id, Generation: -1})
			return
		}
		c.addMemberAndRebalance(g, id, r, reply)
	} else if s, ok := g.pending[r.MemberID]; ok {
		delete(g.pending, r.MemberID)
		s.End()
		c.addMemberAndRebalance(g, r.MemberID, r, reply)
	} else if m := g.members[r.MemberID]; m == nil {
		fail(kerr.UnknownMemberID)
		return
	} else {
		c.rejoinLocked(g, m, r, reply)
	}
	if g.state == groupPreparingRebalance {
		// Noted now, checked when the lock is released.
		c.waits.CheckJoin(g)
	}
}

// rejoinLocked is a JoinGroup from a current member (Kafka's
// doCurrentMemberJoinGroup).
func (c *Coordinator) rejoinLocked(g *Group, m *member, r JoinRequest, reply func(JoinResult)) {
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
		res.Members = nil
		reply(res)
	default: // Empty or Dead: a member here is a contradiction; make it start over
		reply(JoinResult{Err: kerr.UnknownMemberID, MemberID: m.id, Generation: -1})
	}
}

// supports says whether a member with these protocols may join: the
// group's first member sets the protocol type, and every member must
// share at least one protocol with all the others.
func (g *Group) supports(protocolType string, protocols []Protocol) bool {
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
		if g.allSupport(p.Name) {
			return true
		}
	}
	return false
}

func (g *Group) allSupport(name string) bool {
	for _, m := range g.members {
		if !slices.ContainsFunc(m.protocols, func(p Protocol) bool { return p.Name == name }) {
			return false
		}
	}
	return true
}

func (m *member) sameProtocols(ps []Protocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b Protocol) bool {
		return a.Name == b.Name && string(a.Metadata) == string(b.Metadata)
	})
}

// selectProtocol picks the generation's protocol as Kafka does: among the
// protocols every member supports, each member votes for the one it
// prefers most, and the most votes win. A tie goes to the one the leader
// prefers, so that the answer does not depend on map order.
func (g *Group) selectProtocol() string {
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.allSupport(p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best, bestVotes := "", -1
	if l := g.members[g.leader]; l != nil {
		for _, p := range l.protocols {
			if n, ok := votes[p.Name]; ok && n > bestVotes {
				best, bestVotes = p.Name, n
			}
		}
	}
	return best
}

// sortedMembers lists the members in arrival order.
func (g *Group) sortedMembers() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b *member) int { return cmp.Compare(a.seq, b.seq) })
	return ms
}

// joinResultFor is m's answer for the current generation; the leader's
// carries every member's metadata for the chosen protocol.
func (g *Group) joinResultFor(m *member) JoinResult {
	res := JoinResult{MemberID: m.id, Generation: g.generation, ProtocolType: g.protocolType,
		Protocol: g.protocol, Leader: g.leader}
	if m.id == g.leader {
		for _, o := range g.sortedMembers() {
			jm := JoinedMember{ID: o.id}
			for _, p := range o.protocols {
				if p.Name == g.protocol {
					jm.Metadata = p.Metadata
					break
				}
			}
			res.Members = append(res.Members, jm)
		}
	}
	return res
}

func (g *Group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalance)
	}
	return d
}

// addMemberAndRebalance adds a new member whose JoinGroup waits for the
// rebalance, and starts its session.
func (c *Coordinator) addMemberAndRebalance(g *Group, id string, r JoinRequest, reply func(JoinResult)) {
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
	m.hb = c.waits.StartSession(g, id, false, m.session)
	c.maybePrepareRebalance(g)
}

func (c *Coordinator) updateMemberAndRebalance(g *Group, m *member, r JoinRequest, reply func(JoinResult)) {
	m.protocols, m.session, m.rebalance = r.Protocols, r.Session, r.Rebalance
	if m.joinReply != nil {
		// The same member joining twice in one rebalance (its first
		// JoinGroup timed out on the client's side): the older request
		// still needs an answer for its connection to move on.
		m.joinReply(JoinResult{Err: kerr.RebalanceInProgress, MemberID: m.id, Generation: -1})
	}
	m.joinReply = reply
	c.maybePrepareRebalance(g)
}

func (c *Coordinator) maybePrepareRebalance(g *Group) {
	switch g.state {
	case groupStable, groupCompletingRebalance, groupEmpty:
		c.prepareRebalance(g)
	}
}

// prepareRebalance moves g to PreparingRebalance and parks the wait
// that completes the rebalance. The caller holds g's lock (the handler's,
// or the callback's): the park finishes just before it is released.
func (c *Coordinator) prepareRebalance(g *Group) {
	if g.state == groupCompletingRebalance {
		// Members waiting for their assignment must rejoin instead.
		for _, m := range g.members {
			m.assignment = nil
			if m.syncReply != nil {
				reply := m.syncReply
				m.syncReply = nil
				reply(SyncResult{Err: kerr.RebalanceInProgress})
			}
		}
	}
	clear(g.awaitingSync)
	initial := g.state == groupEmpty && c.cfg.InitialRebalanceDelay > 0
	g.state = groupPreparingRebalance
	// The generation's sync wait has nothing left to wait for.
	c.waits.CheckSync(g)
	if initial {
		delay := c.cfg.InitialRebalanceDelay
		c.waits.ParkJoin(g, delay, true, max(g.rebalanceTimeout()-delay, 0))
	} else {
		c.waits.ParkJoin(g, g.rebalanceTimeout(), false, 0)
	}
}

// removeMemberLocked drops m from g (Kafka's removeMemberAndUpdateGroup):
// its waiting requests are answered UNKNOWN_MEMBER_ID, its session ends,
// and the group rebalances without it.
func (c *Coordinator) removeMemberLocked(g *Group, m *member, why Removal) {
	c.dropMemberLocked(g, m, why)
	switch g.state {
	case groupStable, groupCompletingRebalance:
		c.maybePrepareRebalance(g)
	case groupPreparingRebalance:
		c.waits.CheckJoin(g)
	}
}

// dropMemberLocked takes m out of g without starting a rebalance.
func (c *Coordinator) dropMemberLocked(g *Group, m *member, why Removal) {
	if m.joinReply != nil {
		reply := m.joinReply
		m.joinReply = nil
		reply(JoinResult{Err: kerr.UnknownMemberID, Generation: -1})
	}
	if m.syncReply != nil {
		reply := m.syncReply
		m.syncReply = nil
		reply(SyncResult{Err: kerr.UnknownMemberID})
	}
	delete(g.members, m.id)
	delete(g.awaitingSync, m.id)
	if s := m.hb; s != nil {
		m.hb = nil
		s.End()
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
	if c.cfg.OnRemove != nil {
		c.cfg.OnRemove(g.id, MemberSummary{ID: m.id, ClientID: m.clientID, ClientHost: m.clientHost}, why)
	}
}

// CompleteJoin completes a rebalance (Kafka's onCompleteJoin): members
// that did not rejoin are dropped, the next generation begins, and every
// waiting JoinGroup is answered. The rebalance's wait calls it, with g's
// lock held, when it completes, early or at its timeout.
func (c *Coordinator) CompleteJoin(g *Group) {
	if g.state != groupPreparingRebalance {
		return // Dead: answered by the unload
	}
	for _, m := range g.sortedMembers() {
		if m.joinReply == nil {
			c.dropMemberLocked(g, m, RemovedNotRejoined)
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
	c.waits.ParkSync(g, g.generation, g.rebalanceTimeout())
}

// touch restarts m's session, which a heartbeat, a JoinGroup or a
// SyncGroup of it proves alive.
func (c *Coordinator) touch(g *Group, m *member) {
	if m.hb != nil && m.hb.Touch(m.session) {
		return
	}
	// Its session expired while it waited in a rebalance (which keeps a
	// member), or Touch ended it to be replaced: a new session.
	m.hb = c.waits.StartSession(g, m.id, false, m.session)
}

// SessionExpired ends session s of memberID (Kafka's onExpireHeartbeat);
// pending is as given to StartSession. The session calls it, with g's lock
// held, when its timeout passes. A member waiting in a rebalance is kept:
// its client cannot heartbeat while its JoinGroup or SyncGroup is parked,
// and the rebalance's own timeouts bound the wait; its session restarts
// when it is answered.
func (c *Coordinator) SessionExpired(g *Group, memberID string, pending bool, s Session) {
	if g.state == groupDead {
		return
	}
	if pending {
		if g.pending[memberID] == s {
			delete(g.pending, memberID)
			if g.state == groupPreparingRebalance {
				c.waits.CheckJoin(g)
			}
		}
		return
	}
	m := g.members[memberID]
	if m == nil || m.hb != s {
		return
	}
	m.hb = nil
	if m.joinReply != nil || m.syncReply != nil {
		return
	}
	c.removeMemberLocked(g, m, RemovedSessionExpiry)
}

// SyncExpired drops the members of generation that never sent their
// SyncGroup (Kafka's onExpirePendingSync), and rebalances without them.
// The generation's sync wait calls it, with g's lock held, when its
// timeout passes.
func (c *Coordinator) SyncExpired(g *Group, generation int32) {
	if g.generation != generation || (g.state != groupCompletingRebalance && g.state != groupStable) {
		return
	}
	for _, m := range g.sortedMembers() {
		if g.awaitingSync[m.id] {
			c.removeMemberLocked(g, m, RemovedNotSynced)
		}
	}
}

// Sync handles a SyncGroup (Kafka's handleSyncGroup). protocolType and
// protocol are nil below v5. reply may be called later, under the lock.
func (c *Coordinator) Sync(groupID string, generation int32, memberID string, protocolType, protocol *string,
	assignments map[string][]byte, reply func(SyncResult)) {
	if groupID == "" {
		reply(SyncResult{Err: kerr.InvalidGroupID})
		return
	}
	g, e := c.lookup(groupID, false)
	if e != nil {
		reply(SyncResult{Err: e})
		return
	}
	if g == nil {
		reply(SyncResult{Err: kerr.UnknownMemberID})
		return
	}
	g.lock.Lock()
	defer g.lock.Unlock()
	m := g.members[memberID]
	switch {
	case g.state == groupDead:
		reply(SyncResult{Err: kerr.CoordinatorNotAvailable})
		return
	case m == nil:
		reply(SyncResult{Err: kerr.UnknownMemberID})
		return
	case generation != g.generation:
		reply(SyncResult{Err: kerr.IllegalGeneration})
		return
	case protocolType != nil && *protocolType != g.protocolType, protocol != nil && *protocol != g.protocol:
		reply(SyncResult{Err: kerr.InconsistentGroupProtocol})
		return
	}
	switch g.state {
	case groupPreparingRebalance:
		reply(SyncResult{Err: kerr.RebalanceInProgress})
	case groupCompletingRebalance:
		if m.syncReply != nil { // a second SyncGroup while the first waits
			m.syncReply(SyncResult{Err: kerr.RebalanceInProgress})
		}
		m.syncReply = reply
		delete(g.awaitingSync, m.id)
		c.waits.CheckSync(g)
		if m.id == g.leader {
			for _, o := range g.members {
				o.assignment = assignments[o.id] // a member the leader left out gets nothing
			}
			g.state = groupStable
			for _, o := range g.sortedMembers() {
				if o.syncReply != nil {
					r := o.syncReply
					o.syncReply = nil
					r(SyncResult{Assignment: o.assignment, ProtocolType: g.protocolType, Protocol: g.protocol})
					c.touch(g, o)
				}
			}
		}
	case groupStable:
		delete(g.awaitingSync, m.id)
		c.waits.CheckSync(g)
		reply(SyncResult{Assignment: m.assignment, ProtocolType: g.protocolType, Protocol: g.protocol})
		c.touch(g, m)
	default: // Empty: no members, so not reached
		reply(SyncResult{Err: kerr.UnknownMemberID})
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
		if s, ok := g.pending[id]; ok {
			delete(g.pending, id)
			s.End()
			if g.state == groupPreparingRebalance {
				c.waits.CheckJoin(g)
			}
			continue
		}
		m := g.members[id]
		if m == nil {
			errs[i] = kerr.UnknownMemberID
			continue
		}
		c.removeMemberLocked(g, m, RemovedLeft)
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
// its own partitions), allowed while the group has no members. known says
// whether the broker has a partition.
func (c *Coordinator) CommitOffsets(known func(tpKey) bool, groupID string, generation int32, memberID string, commits []OffsetCommit) []*kerr.Error {
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
		case !known(oc.TP):
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
				if p.Name == g.protocol {
					ms.Metadata = p.Metadata
				}
			}
			ms.Assignment = m.assignment
		}
		s.Members = append(s.Members, ms)
	}
	return s, true, nil
}

// Stats are the coordinator's figures for the status line.
type Stats struct {
	Groups, Members int
}

// Stats counts the groups and their members.
func (c *Coordinator) Stats() Stats {
	var st Stats
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
// NOT_COORDINATOR (Waits.Unload), rather than left to their timeouts, and
// requests from then on get COORDINATOR_NOT_AVAILABLE. Then it shuts the
// waits down.
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
	return c.waits.Shutdown(ctx)
}

// unload marks g Dead and ends its waits with Waits.Unload: the
// rebalance's wait answers the parked JoinGroups, the sync wait the parked
// SyncGroups, and the sessions just end.
func (c *Coordinator) unload(g *Group) {
	g.lock.Lock()
	defer g.lock.Unlock()
	g.state = groupDead
	ids := make([]string, 0, len(g.pending)+len(g.members))
	for id := range g.pending {
		ids = append(ids, id)
	}
	for id, m := range g.members {
		ids = append(ids, id)
		m.hb = nil
	}
	c.waits.Unload(g, ids)
	clear(g.pending)
	// Every parked request was on one of those waits: a JoinGroup only
	// waits in PreparingRebalance, with the rebalance's wait parked, and a
	// SyncGroup only in CompletingRebalance, with the sync wait. This
	// sweep answers what a broken invariant would leave hanging.
	g.AnswerUnloaded()
}

// AnswerUnloaded answers every waiting JoinGroup and SyncGroup of g with
// NOT_COORDINATOR: the group moved away. The caller holds g's lock.
func (g *Group) AnswerUnloaded() {
	for _, m := range g.members {
		answerUnloaded(m)
	}
}

// answerUnloaded answers m's waiting requests: the group moved away.
func answerUnloaded(m *member) {
	if m.joinReply != nil {
		r := m.joinReply
		m.joinReply = nil
		r(JoinResult{Err: kerr.NotCoordinator, MemberID: m.id, Generation: -1})
	}
	if m.syncReply != nil {
		r := m.syncReply
		m.syncReply = nil
		r(SyncResult{Err: kerr.NotCoordinator})
	}
}
