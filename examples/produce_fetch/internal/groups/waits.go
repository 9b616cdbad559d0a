package groups

import (
	"context"
	"time"

	"github.com/purgatory-go/purgatory/operation"
)

// Waits parks and checks the coordinator's three kinds of wait. Every
// method but Shutdown is called with g's lock held; a park made then
// finishes just before the lock is released (operation.SharedLock).
type Waits interface {
	// ParkJoin parks the wait of g's rebalance: it completes, calling
	// CompleteJoin, once every known member has sent its JoinGroup
	// (Group.AllJoined) or when timeout passes. An initial one is the
	// first rebalance of an empty group (Kafka's InitialDelayedJoin): it
	// never completes early, and if members joined meanwhile
	// (Group.TakeNewMemberAdded) it waits again, for at most remaining in
	// all.
	ParkJoin(g *Group, timeout time.Duration, initial bool, remaining time.Duration)
	// CheckJoin tries to complete g's rebalance wait: a member joined,
	// left or expired.
	CheckJoin(g *Group)
	// ParkSync parks the wait of generation for its members' SyncGroups
	// (Group.AwaitingSync); at timeout it calls SyncExpired.
	ParkSync(g *Group, generation int32, timeout time.Duration)
	// CheckSync tries to complete g's sync wait: a member synced, or the
	// generation is over.
	CheckSync(g *Group)
	// StartSession parks memberID's session, which calls SessionExpired
	// at timeout unless it is touched first. A pending session guards an
	// id handed out with MEMBER_ID_REQUIRED that has not joined yet.
	StartSession(g *Group, memberID string, pending bool, timeout time.Duration) Session
	// Unload ends every wait of g, answering the JoinGroups and SyncGroups
	// parked on them with NOT_COORDINATOR (Group.AnswerUnloaded);
	// sessions lists the member ids with a session, pending ones included.
	Unload(g *Group, sessions []string)
	// Shutdown stops the waits once every group is unloaded.
	Shutdown(ctx context.Context) error
}

// Session is a member's session, as StartSession parked it. Its methods
// are called with its group's lock held.
type Session interface {
	// Touch restarts the session: it now ends timeout from now. It
	// returns false if the session has ended (or Touch ended it, to be
	// replaced), and the coordinator starts a new one.
	Touch(timeout time.Duration) bool
	// End ends the session quietly: its member left or was replaced.
	End()
}

// ID is the group's id.
func (g *Group) ID() string { return g.id }

// SharedLock is the group's lock, and the lock of each of its waits.
func (g *Group) SharedLock() *operation.SharedLock { return &g.lock }

// AllJoined says whether every member's JoinGroup is parked and no member
// handed an id is yet to come back (Kafka's hasAllMembersJoined).
func (g *Group) AllJoined() bool {
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

// Rebalancing says whether g is in PreparingRebalance: a rebalance wait
// that completes when it is not has nothing left to do.
func (g *Group) Rebalancing() bool { return g.state == groupPreparingRebalance }

// TakeNewMemberAdded reports whether a member joined during the initial
// rebalance delay, and forgets it: the initial wait then waits once more.
func (g *Group) TakeNewMemberAdded() bool {
	added := g.newMemberAdded
	g.newMemberAdded = false
	return added
}

// AwaitingSync says whether generation is g's current one and some of its
// members have yet to send their SyncGroup.
func (g *Group) AwaitingSync(generation int32) bool {
	return g.generation == generation && len(g.awaitingSync) > 0 &&
		(g.state == groupCompletingRebalance || g.state == groupStable)
}

// HasSession says whether s is still memberID's session (pending: its
// pending id's). A session that is not has ended: its member left, or a
// newer session replaced it.
func (g *Group) HasSession(memberID string, pending bool, s Session) bool {
	if pending {
		return g.pending[memberID] == s
	}
	m := g.members[memberID]
	return m != nil && m.hb == s
}

// Closed says whether the coordinator is closed: FindCoordinator then
// answers COORDINATOR_NOT_AVAILABLE.
func (c *Coordinator) Closed() bool { return c.closed.Load() }
