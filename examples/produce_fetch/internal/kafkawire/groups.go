package kafkawire

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/groups"
)

// The group APIs over Kafka's wire protocol: each handler turns a kmsg
// request into a call of the coordinator (internal/groups) and its result back
// into the kmsg response of the request's version. JoinGroup and SyncGroup
// may be answered later, from the coordinator's callbacks.

// reqContext is what a handler knows of the request's sender.
type reqContext struct {
	clientID string
	host     string // the client's address, as DescribeGroups shows it
}

func errCode(e *kerr.Error) int16 {
	if e == nil {
		return 0
	}
	return e.Code
}

// known says whether the broker has partition tp.
func (s *Server) known(tp tpKey) bool {
	_, ok := s.b.Partition(tp)
	return ok
}

func millis(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

// findCoordinator names this broker as the coordinator of every group, in
// the single-key form (v0-3) and the batched form (v4+). There is no
// transaction coordinator here: transactional keys get
// COORDINATOR_NOT_AVAILABLE.
func (s *Server) findCoordinator(req *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	host, port := s.advertised()
	lookup := func() (int32, string, int32, *kerr.Error) {
		switch {
		case req.CoordinatorType != 0:
			return -1, "", -1, kerr.CoordinatorNotAvailable
		case s.b.Groups().Closed():
			return -1, "", -1, kerr.CoordinatorNotAvailable
		}
		return 0, host, port, nil
	}
	if req.Version >= 4 {
		for _, key := range req.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key = key
			var e *kerr.Error
			c.NodeID, c.Host, c.Port, e = lookup()
			c.ErrorCode = errCode(e)
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	}
	var e *kerr.Error
	resp.NodeID, resp.Host, resp.Port, e = lookup()
	resp.ErrorCode = errCode(e)
	return resp
}

// joinGroup parks until the rebalance completes (or answers at once).
// Static membership (v5+'s group.instance.id) is not supported: such a
// member is treated as a dynamic one.
func (s *Server) joinGroup(req *kmsg.JoinGroupRequest, rc reqContext, answer func(kmsg.Response)) {
	r := groups.JoinRequest{Group: req.Group, MemberID: req.MemberID, ClientID: rc.clientID, ClientHost: rc.host,
		ProtocolType: req.ProtocolType, Session: millis(req.SessionTimeoutMillis),
		Rebalance: millis(req.RebalanceTimeoutMillis), RequireKnownMemberID: req.Version >= 4}
	if req.Version == 0 {
		r.Rebalance = r.Session // v0 has one timeout for both
	}
	for _, p := range req.Protocols {
		r.Protocols = append(r.Protocols, groups.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	s.b.Groups().Join(r, func(res groups.JoinResult) {
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = errCode(res.Err)
		resp.Generation = res.Generation
		resp.MemberID = res.MemberID
		resp.LeaderID = res.Leader
		if res.Err == nil {
			resp.ProtocolType = kmsg.StringPtr(res.ProtocolType)
			resp.Protocol = kmsg.StringPtr(res.Protocol)
		} else if req.Version < 7 {
			resp.Protocol = kmsg.StringPtr("") // not nullable before v7
		}
		for _, m := range res.Members {
			jm := kmsg.NewJoinGroupResponseMember()
			jm.MemberID, jm.ProtocolMetadata = m.ID, m.Metadata
			resp.Members = append(resp.Members, jm)
		}
		answer(resp)
	})
}

func (s *Server) syncGroup(req *kmsg.SyncGroupRequest, answer func(kmsg.Response)) {
	assignments := make(map[string][]byte, len(req.GroupAssignment))
	for _, a := range req.GroupAssignment {
		assignments[a.MemberID] = a.MemberAssignment
	}
	s.b.Groups().Sync(req.Group, req.Generation, req.MemberID, req.ProtocolType, req.Protocol, assignments, func(res groups.SyncResult) {
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = errCode(res.Err)
		resp.MemberAssignment = res.Assignment
		if resp.MemberAssignment == nil {
			resp.MemberAssignment = []byte{}
		}
		if res.Err == nil {
			resp.ProtocolType, resp.Protocol = kmsg.StringPtr(res.ProtocolType), kmsg.StringPtr(res.Protocol)
		}
		answer(resp)
	})
}

func (s *Server) heartbeat(req *kmsg.HeartbeatRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.ErrorCode = errCode(s.b.Groups().Heartbeat(req.Group, req.Generation, req.MemberID))
	return resp
}

// leaveGroup takes one member (v0-2) or a batch (v3+). Below v3 the
// member's error is the response's.
func (s *Server) leaveGroup(req *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	ids := []string{req.MemberID}
	if req.Version >= 3 {
		ids = ids[:0]
		for _, m := range req.Members {
			ids = append(ids, m.MemberID)
		}
	}
	top, errs := s.b.Groups().Leave(req.Group, ids)
	resp.ErrorCode = errCode(top)
	if req.Version < 3 {
		if top == nil {
			resp.ErrorCode = errCode(errs[0])
		}
		return resp
	}
	if top == nil {
		for i, m := range req.Members {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ErrorCode = m.MemberID, m.InstanceID, errCode(errs[i])
			resp.Members = append(resp.Members, rm)
		}
	}
	return resp
}

func (s *Server) offsetCommit(req *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	var commits []groups.OffsetCommit
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			commits = append(commits, groups.OffsetCommit{TP: tpKey{Topic: t.Topic, Partition: p.Partition},
				Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata})
		}
	}
	generation := req.Generation
	if req.Version == 0 {
		generation = -1 // v0 predates group membership: offsets only
	}
	errs := s.b.Groups().CommitOffsets(s.known, req.Group, generation, req.MemberID, commits)
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, errCode(errs[i])
			i++
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// offsetFetch reads committed offsets for one group (v0-7) or several
// (v8+). Null topics ask for every partition the group has committed.
func (s *Server) offsetFetch(req *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	type groupTopics struct {
		group  string
		topics map[string][]int32 // nil: all
		order  []string
	}
	fetch := func(gt groupTopics) ([]groups.FetchedOffset, *kerr.Error) {
		var tps []tpKey
		if gt.topics != nil {
			tps = []tpKey{}
			for _, t := range gt.order {
				for _, p := range gt.topics[t] {
					tps = append(tps, tpKey{Topic: t, Partition: p})
				}
			}
		}
		return s.b.Groups().FetchOffsets(gt.group, tps)
	}
	// byTopic groups fetched offsets by topic, in the order they came.
	byTopic := func(fos []groups.FetchedOffset, add func(topic string, fo groups.FetchedOffset)) {
		for _, fo := range fos {
			add(fo.TP.Topic, fo)
		}
	}
	metadata := func(m *string) *string {
		if m == nil {
			return kmsg.StringPtr("")
		}
		return m
	}
	if req.Version < 8 {
		gt := groupTopics{group: req.Group}
		if req.Topics != nil {
			gt.topics = map[string][]int32{}
			for _, t := range req.Topics {
				gt.topics[t.Topic] = append(gt.topics[t.Topic], t.Partitions...)
				gt.order = append(gt.order, t.Topic)
			}
		}
		fos, e := fetch(gt)
		resp.ErrorCode = errCode(e)
		idx := map[string]int{}
		byTopic(fos, func(topic string, fo groups.FetchedOffset) {
			i, ok := idx[topic]
			if !ok {
				i = len(resp.Topics)
				idx[topic] = i
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = topic
				resp.Topics = append(resp.Topics, rt)
			}
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = fo.TP.Partition, fo.Offset, fo.LeaderEpoch, metadata(fo.Metadata)
			resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
		})
		if e != nil && req.Version < 2 {
			// No top-level error before v2: each partition carries it.
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					resp.Topics[i].Partitions[j].ErrorCode = e.Code
				}
			}
		}
		return resp
	}
	for _, g := range req.Groups {
		gt := groupTopics{group: g.Group}
		if g.Topics != nil {
			gt.topics = map[string][]int32{}
			for _, t := range g.Topics {
				gt.topics[t.Topic] = append(gt.topics[t.Topic], t.Partitions...)
				gt.order = append(gt.order, t.Topic)
			}
		}
		fos, e := fetch(gt)
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = g.Group, errCode(e)
		idx := map[string]int{}
		byTopic(fos, func(topic string, fo groups.FetchedOffset) {
			i, ok := idx[topic]
			if !ok {
				i = len(rg.Topics)
				idx[topic] = i
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = topic
				rg.Topics = append(rg.Topics, rt)
			}
			rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = fo.TP.Partition, fo.Offset, fo.LeaderEpoch, metadata(fo.Metadata)
			rg.Topics[i].Partitions = append(rg.Topics[i].Partitions, rp)
		})
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// listGroups lists every group, filtered by state (v4+) and type (v5+:
// every group here is "classic").
func (s *Server) listGroups(req *kmsg.ListGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	gs, e := s.b.Groups().ListGroups()
	resp.ErrorCode = errCode(e)
	want := func(filter []string, v string) bool {
		if len(filter) == 0 {
			return true
		}
		for _, f := range filter {
			if f == v {
				return true
			}
		}
		return false
	}
	for _, g := range gs {
		if !want(req.StatesFilter, g.State) || !want(req.TypesFilter, "classic") {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = g.ID, g.ProtocolType, g.State, "classic"
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// describeGroups describes each group; an unknown one is Dead, and from
// v6 on also GROUP_ID_NOT_FOUND, as in Kafka.
func (s *Server) describeGroups(req *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		sum, ok, e := s.b.Groups().DescribeGroup(id)
		rg.State, rg.ProtocolType, rg.Protocol = sum.State, sum.ProtocolType, sum.Protocol
		switch {
		case e != nil:
			rg.ErrorCode = e.Code
		case !ok && req.Version >= 6:
			rg.ErrorCode = kerr.GroupIDNotFound.Code
		}
		for _, m := range sum.Members {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.ClientID, rm.ClientHost = m.ID, m.ClientID, m.ClientHost
			rm.ProtocolMetadata, rm.MemberAssignment = m.Metadata, m.Assignment
			if rm.ProtocolMetadata == nil {
				rm.ProtocolMetadata = []byte{}
			}
			if rm.MemberAssignment == nil {
				rm.MemberAssignment = []byte{}
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}
