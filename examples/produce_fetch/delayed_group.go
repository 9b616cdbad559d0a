package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/groups"
	"github.com/purgatory-go/purgatory/operation"
	"github.com/purgatory-go/purgatory/purgatory"
	"github.com/purgatory-go/purgatory/timer"
)

// The group coordinator's three waits, each a delayed operation in a
// purgatory of its own, as in Kafka's GroupCoordinator: DelayedJoin (and
// Kafka's InitialDelayedJoin), DelayedSync and DelayedHeartbeat. The
// coordinator's state machine (internal/groups) asks for them through
// groups.Waits, which Coordinator implements here:
//
//   - DelayedJoin, one per rebalance, watched on the group's GroupJoinKey:
//     it completes when every known member has sent its JoinGroup, or at
//     the rebalance timeout, when the members that did not rejoin are
//     dropped. Its completion answers every parked JoinGroup.
//   - DelayedSync, one per generation, watched on GroupSyncKey: members
//     that have not sent their SyncGroup when it expires are dropped
//     (Kafka's pending-sync timeout). The SyncGroups themselves wait on
//     their member, as in Kafka, until the leader's assignment comes.
//   - DelayedHeartbeat, one per member, watched on its MemberKey: its
//     deadline is the end of the member's session. A heartbeat moves the
//     deadline with ResetTimeout; when it expires the member is dropped
//     and the group rebalances.
//
// All of a group's operations share the group's operation.SharedLock
// (Kafka's group.lock, passed as their lockOpt), which also guards the
// group's state, and every callback the purgatory runs (TryComplete,
// OnComplete, OnExpiration) runs with it held, so they read and change
// the group's state directly. The coordinator's own ForceCompletes and
// CompleteForKeys are made with the lock held too, so that OnComplete
// always finds it held, whoever completes.

// errGroupUnloaded is the Cause of the operations Unload completes with
// CompleteForKey: their callbacks answer what waits with NOT_COORDINATOR.
var errGroupUnloaded = errors.New("group coordinator: the broker is shutting down")

// GroupConfig configures the group coordinator: its state machine's
// settings and its three purgatories'.
type GroupConfig struct {
	// InitialRebalanceDelay, MinSessionTimeout and MaxSessionTimeout are
	// groups.Config's.
	InitialRebalanceDelay                time.Duration
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
	// OnRemove is groups.Config's, for tests.
	OnRemove func(group string, m groups.MemberSummary, why groups.Removal)
}

type (
	joinKey   = operation.GroupJoinKey
	syncKey   = operation.GroupSyncKey
	memberKey = operation.MemberKey
)

// Coordinator is the group coordinator (groups.Coordinator) with its
// three purgatories. Its methods are safe for concurrent use.
type Coordinator struct {
	*groups.Coordinator
	cfg       GroupConfig
	join      *purgatory.Purgatory[joinKey, *DelayedJoin]
	sync      *purgatory.Purgatory[syncKey, *DelayedSync]
	heartbeat *purgatory.Purgatory[memberKey, *DelayedHeartbeat]
}

// NewCoordinator returns a coordinator with its three purgatories.
func NewCoordinator(cfg GroupConfig) (*Coordinator, error) {
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
	c.Coordinator = groups.New(groups.Config{InitialRebalanceDelay: cfg.InitialRebalanceDelay,
		MinSessionTimeout: cfg.MinSessionTimeout, MaxSessionTimeout: cfg.MaxSessionTimeout, OnRemove: cfg.OnRemove}, c)
	return c, nil
}

// GroupStats are the coordinator's figures for the status line.
type GroupStats struct {
	groups.Stats
	// Join, Sync and Heartbeat are the three purgatories' counters:
	// rebalances in progress, generations waiting for SyncGroups, and
	// sessions (one parked per member).
	Join, Sync, Heartbeat purgatory.Stats
}

// Stats counts the groups and their members, and reads the purgatories.
func (c *Coordinator) Stats() GroupStats {
	return GroupStats{Stats: c.Coordinator.Stats(), Join: c.join.Stats(), Sync: c.sync.Stats(), Heartbeat: c.heartbeat.Stats()}
}

// DelayedJoin waits for a rebalance: for every known member to send its
// JoinGroup (and every member given an id with MEMBER_ID_REQUIRED to come
// back with it), or for the rebalance timeout, the longest of the
// members'. Its completion, either way, completes the rebalance: members
// that did not rejoin are dropped, and each parked JoinGroup is answered.
//
// An initial one is Kafka's InitialDelayedJoin, the first rebalance of an
// empty group: it never completes early, and if members joined while it
// waited it waits once more, until none come for a whole delay or the
// rebalance timeout is used up.
type DelayedJoin struct {
	operation.Base
	c         *Coordinator
	g         *groups.Group
	initial   bool
	remaining time.Duration // initial: what is left of the rebalance timeout after this delay
}

// ParkJoin parks a DelayedJoin on g's join key (groups.Waits). The caller
// holds the group's lock, so the park finishes just before it is released.
func (c *Coordinator) ParkJoin(g *groups.Group, timeout time.Duration, initial bool, remaining time.Duration) {
	d := &DelayedJoin{c: c, g: g, initial: initial, remaining: remaining}
	d.Init(d, timeout, operation.WithLock(g.SharedLock()))
	if _, err := c.join.TryCompleteElseWatch(d, joinKey{GroupID: g.ID()}); err != nil {
		// Refused only once the purgatory is shut down, after every group
		// was unloaded; nothing waits on it then.
		d.ForceComplete()
	}
}

// CheckJoin tries to complete g's rebalance; under g's lock, the check
// is made just after it is released.
func (c *Coordinator) CheckJoin(g *groups.Group) { c.join.CheckAndComplete(joinKey{GroupID: g.ID()}) }

// TryComplete completes the rebalance once every member has rejoined.
func (d *DelayedJoin) TryComplete() bool {
	if d.initial || !d.g.AllJoined() {
		return false
	}
	return d.ForceComplete()
}

// OnComplete completes the rebalance, or for an initial delay during which
// members joined, waits once more.
func (d *DelayedJoin) OnComplete() {
	g := d.g
	if errors.Is(d.Cause(), errGroupUnloaded) {
		g.AnswerUnloaded()
		return
	}
	if !g.Rebalancing() {
		return
	}
	if d.initial && d.remaining > 0 && g.TakeNewMemberAdded() {
		delay := min(d.c.cfg.InitialRebalanceDelay, d.remaining)
		// Parked from a callback that runs under the group's lock: the
		// SharedLock finishes the park just before the lock is released.
		d.c.ParkJoin(g, delay, true, d.remaining-delay)
		return
	}
	d.c.CompleteJoin(g)
}

// OnExpiration has nothing to add: the rebalance completed in OnComplete,
// without the members that did not rejoin.
func (d *DelayedJoin) OnExpiration() {}

// DelayedSync is a generation's wait for its members' SyncGroups (Kafka's
// DelayedSync, after KIP-814's pending-sync timeout): the members that
// have not sent one when it expires, the rebalance timeout after the
// generation began, are dropped and the group rebalances. It completes
// quietly once every member has synced or the generation is over.
type DelayedSync struct {
	operation.Base
	c          *Coordinator
	g          *groups.Group
	generation int32
}

// ParkSync parks a DelayedSync on g's sync key (groups.Waits), under g's
// lock as ParkJoin.
func (c *Coordinator) ParkSync(g *groups.Group, generation int32, timeout time.Duration) {
	s := &DelayedSync{c: c, g: g, generation: generation}
	s.Init(s, timeout, operation.WithLock(g.SharedLock()))
	if _, err := c.sync.TryCompleteElseWatch(s, syncKey{GroupID: g.ID()}); err != nil {
		s.ForceComplete() // as in ParkJoin
	}
}

// CheckSync tries to complete g's DelayedSync.
func (c *Coordinator) CheckSync(g *groups.Group) { c.sync.CheckAndComplete(syncKey{GroupID: g.ID()}) }

// TryComplete completes once nobody of its generation is left to sync.
func (s *DelayedSync) TryComplete() bool {
	if s.g.AwaitingSync(s.generation) {
		return false
	}
	return s.ForceComplete()
}

// OnComplete answers the parked SyncGroups if the group is being unloaded.
func (s *DelayedSync) OnComplete() {
	if errors.Is(s.Cause(), errGroupUnloaded) {
		s.g.AnswerUnloaded()
	}
}

// OnExpiration drops the members that did not sync in time.
func (s *DelayedSync) OnExpiration() { s.c.SyncExpired(s.g, s.generation) }

// DelayedHeartbeat is a member's session: it expires a session timeout
// after the member was last heard from, and then the member is dropped
// and its group rebalances. Each heartbeat (and JoinGroup, SyncGroup,
// OffsetCommit) moves its deadline with ResetTimeout; Kafka instead
// completes it and parks a new one each time (GroupConfig.Repark).
//
// A pending one guards an id handed out with MEMBER_ID_REQUIRED: if the
// client does not join with it within a session, the id is forgotten and
// the rebalance stops waiting for it.
type DelayedHeartbeat struct {
	operation.Base
	c        *Coordinator
	g        *groups.Group
	memberID string
	pending  bool
	// tried is set by the first TryComplete, which the park makes: until
	// then a park made under the group's lock is still to be finished, at
	// its unlock, and the operation must be left alone (Touch).
	tried bool
}

// StartSession parks a DelayedHeartbeat on the member's key
// (groups.Waits), under g's lock as ParkJoin.
func (c *Coordinator) StartSession(g *groups.Group, memberID string, pending bool, timeout time.Duration) groups.Session {
	h := &DelayedHeartbeat{c: c, g: g, memberID: memberID, pending: pending}
	h.Init(h, timeout, operation.WithLock(g.SharedLock()))
	if _, err := c.heartbeat.TryCompleteElseWatch(h, memberKey{GroupID: g.ID(), MemberID: memberID}); err != nil {
		h.ForceComplete() // as in ParkJoin
	}
	return h
}

// Touch moves the session's deadline to timeout from now, with
// ResetTimeout, or with Repark completes it so that the coordinator parks
// a new one (groups.Session).
func (h *DelayedHeartbeat) Touch(timeout time.Duration) bool {
	switch {
	case !h.tried:
		// Parked under this lock, and not yet in the purgatory (as when
		// a member's first JoinGroup completes the rebalance): its park,
		// finished as the lock is released, gives it a whole session.
		return true
	case h.c.cfg.Repark:
		// Kafka's way: complete the operation and park a new one.
		h.ForceComplete()
		return false
	}
	return h.c.heartbeat.ResetTimeout(h, timeout)
}

// End completes the session early, under g's lock, which its callbacks
// expect (groups.Session).
func (h *DelayedHeartbeat) End() { h.ForceComplete() }

// TryComplete completes a session that is no longer its member's: the
// member left, or a newer session replaced this one. A live session never
// completes early; only its expiry matters.
func (h *DelayedHeartbeat) TryComplete() bool {
	h.tried = true
	if h.g.HasSession(h.memberID, h.pending, h) {
		return false
	}
	return h.ForceComplete()
}

// OnComplete has nothing to do: a session that ends early ended because
// its member left or was replaced.
func (h *DelayedHeartbeat) OnComplete() {}

// OnExpiration ends the member's session.
func (h *DelayedHeartbeat) OnExpiration() { h.c.SessionExpired(h.g, h.memberID, h.pending, h) }

// Unload completes g's operations with errGroupUnloaded (groups.Waits):
// the DelayedJoin answers the parked JoinGroups, the DelayedSync the
// parked SyncGroups, and the heartbeats just end. CompleteForKey takes no
// lock, so it runs here under g's, which the callbacks expect to hold.
func (c *Coordinator) Unload(g *groups.Group, sessions []string) {
	c.join.CompleteForKey(joinKey{GroupID: g.ID()}, errGroupUnloaded)
	c.sync.CompleteForKey(syncKey{GroupID: g.ID()}, errGroupUnloaded)
	for _, id := range sessions {
		c.heartbeat.CompleteForKey(memberKey{GroupID: g.ID(), MemberID: id}, errGroupUnloaded)
	}
}

// Shutdown shuts the three purgatories down (groups.Waits), once Close
// has unloaded every group.
func (c *Coordinator) Shutdown(ctx context.Context) error {
	return errors.Join(c.join.Shutdown(ctx), c.sync.Shutdown(ctx), c.heartbeat.Shutdown(ctx))
}
