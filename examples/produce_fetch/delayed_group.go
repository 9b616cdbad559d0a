package main

import (
	"errors"
	"time"

	"github.com/purgatory-go/purgatory/operation"
)

// The group coordinator's three delayed operations (Kafka's DelayedJoin,
// InitialDelayedJoin, DelayedSync and DelayedHeartbeat). All of a group's
// operations share the group's SharedLock, and every callback the
// purgatory runs (TryComplete, OnComplete, OnExpiration) runs with it
// held, so they read and change the group's state directly. The
// coordinator's own ForceCompletes are made with the lock held too, so
// that OnComplete always finds it held, whoever completes.

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
	g         *group
	initial   bool
	remaining time.Duration // initial: what is left of the rebalance timeout after this delay
}

func (c *Coordinator) newDelayedJoin(g *group, timeout time.Duration, initial bool, remaining time.Duration) *DelayedJoin {
	d := &DelayedJoin{c: c, g: g, initial: initial, remaining: remaining}
	d.Init(d, timeout, operation.WithLock(&g.lock))
	return d
}

// parkJoin parks d on its group's join key. The caller holds the group's
// lock, so the park finishes just before it is released.
func (c *Coordinator) parkJoin(d *DelayedJoin) {
	if _, err := c.join.TryCompleteElseWatch(d, joinKey{GroupID: d.g.id}); err != nil {
		// Refused only once the purgatory is shut down, after every group
		// was unloaded; nothing waits on it then.
		d.ForceComplete()
	}
}

// TryComplete completes the rebalance once every member has rejoined.
func (d *DelayedJoin) TryComplete() bool {
	if d.initial || !d.g.allJoined() {
		return false
	}
	return d.ForceComplete()
}

// allJoined says whether every member's JoinGroup is parked and no
// member handed an id is yet to come back (Kafka's hasAllMembersJoined).
func (g *group) allJoined() bool {
	if len(g.pending) > 0 {
		return false
	}
	for _, m := range g.members {
		if m.joinReply == nil {
			return false
		}
	}
	return true
}

// OnComplete completes the rebalance, or for an initial delay during which
// members joined, waits once more.
func (d *DelayedJoin) OnComplete() {
	g := d.g
	if errors.Is(d.Cause(), errGroupUnloaded) {
		for _, m := range g.members {
			answerUnloaded(m)
		}
		return
	}
	if g.state != groupPreparingRebalance {
		return
	}
	if d.initial && g.newMemberAdded && d.remaining > 0 {
		g.newMemberAdded = false
		delay := min(d.c.cfg.InitialRebalanceDelay, d.remaining)
		// Parked from a callback that runs under the group's lock: the
		// SharedLock finishes the park just before the lock is released.
		d.c.parkJoin(d.c.newDelayedJoin(g, delay, true, d.remaining-delay))
		return
	}
	d.c.completeJoinLocked(g)
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
	g          *group
	generation int32
}

func (c *Coordinator) newDelayedSync(g *group, generation int32, timeout time.Duration) *DelayedSync {
	s := &DelayedSync{c: c, g: g, generation: generation}
	s.Init(s, timeout, operation.WithLock(&g.lock))
	return s
}

func (c *Coordinator) parkSync(s *DelayedSync) {
	if _, err := c.sync.TryCompleteElseWatch(s, syncKey{GroupID: s.g.id}); err != nil {
		s.ForceComplete() // as in parkJoin
	}
}

// TryComplete completes once nobody of its generation is left to sync.
func (s *DelayedSync) TryComplete() bool {
	g := s.g
	if g.generation == s.generation && len(g.awaitingSync) > 0 &&
		(g.state == groupCompletingRebalance || g.state == groupStable) {
		return false
	}
	return s.ForceComplete()
}

// OnComplete answers the parked SyncGroups if the group is being unloaded.
func (s *DelayedSync) OnComplete() {
	if errors.Is(s.Cause(), errGroupUnloaded) {
		for _, m := range s.g.members {
			answerUnloaded(m)
		}
	}
}

// OnExpiration drops the members that did not sync in time.
func (s *DelayedSync) OnExpiration() { s.c.onSyncExpired(s.g, s.generation) }

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
	g        *group
	memberID string
	pending  bool
	// tried is set by the first TryComplete, which the park makes: until
	// then a park made under the group's lock is still to be finished, at
	// its unlock, and the operation must be left alone (touch).
	tried bool
}

func (c *Coordinator) newHeartbeat(g *group, memberID string, pending bool, session time.Duration) *DelayedHeartbeat {
	h := &DelayedHeartbeat{c: c, g: g, memberID: memberID, pending: pending}
	h.Init(h, session, operation.WithLock(&g.lock))
	return h
}

func (c *Coordinator) parkHeartbeat(h *DelayedHeartbeat) {
	if _, err := c.heartbeat.TryCompleteElseWatch(h, memberKey{GroupID: h.g.id, MemberID: h.memberID}); err != nil {
		h.ForceComplete() // as in parkJoin
	}
}

// TryComplete completes a session that is no longer its member's: the
// member left, or a newer session replaced this one. A live session never
// completes early; only its expiry matters.
func (h *DelayedHeartbeat) TryComplete() bool {
	h.tried = true
	if h.pending {
		if h.g.pending[h.memberID] == h {
			return false
		}
	} else if m := h.g.members[h.memberID]; m != nil && m.hb == h {
		return false
	}
	return h.ForceComplete()
}

// OnComplete has nothing to do: a session that ends early ended because
// its member left or was replaced.
func (h *DelayedHeartbeat) OnComplete() {}

// OnExpiration ends the member's session.
func (h *DelayedHeartbeat) OnExpiration() { h.c.onHeartbeatExpired(h.g, h) }
