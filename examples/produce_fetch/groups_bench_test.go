package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/groups"
)

// BenchmarkHeartbeat measures one Heartbeat through the coordinator, with
// 1,000 members in 10 Stable groups on real timers (a SystemTimer and its
// reaper per purgatory), each way of keeping a session alive in the same
// run:
//
//   - way=reset moves the member's parked DelayedHeartbeat's deadline with
//     ResetTimeout: no allocation, no timer add or cancel;
//
//   - way=repark is Kafka's: complete the DelayedHeartbeat and park a new
//     one (an operation, a watch and a timer entry per heartbeat). Kafka
//     also looks the member's key up with a check to complete the old one;
//     this completes it directly, so it is a lower bound of Kafka's cost.
//
//     go test -run '^$' -bench Heartbeat -benchmem ./produce_fetch
func BenchmarkHeartbeat(b *testing.B) {
	for _, way := range []string{"reset", "repark"} {
		b.Run("way="+way, func(b *testing.B) {
			c, err := NewCoordinator(GroupConfig{InitialRebalanceDelay: 10 * time.Millisecond, Repark: way == "repark"})
			require.NoError(b, err)
			defer func() { require.NoError(b, c.Close(context.Background())) }()
			type member struct{ group, id string }
			var ms []member
			for g := range 10 {
				name := fmt.Sprintf("bench-%d", g)
				results := make(chan groups.JoinResult, 100)
				for range 100 {
					c.Join(groups.JoinRequest{Group: name, ClientID: "bench", ProtocolType: "consumer",
						Protocols: []groups.Protocol{{Name: "range"}}, Session: 30 * time.Second, Rebalance: 30 * time.Second},
						func(r groups.JoinResult) { results <- r })
				}
				var ids []string
				for range 100 {
					r := <-results // after the initial delay
					require.Nil(b, r.Err)
					ids = append(ids, r.MemberID)
				}
				synced := make(chan groups.SyncResult, 100)
				for i := len(ids) - 1; i >= 0; i-- {
					c.Sync(name, 1, ids[i], nil, nil, map[string][]byte{}, func(r groups.SyncResult) { synced <- r })
				}
				for range 100 {
					require.Nil(b, (<-synced).Err)
				}
				for _, id := range ids {
					ms = append(ms, member{name, id})
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				m := ms[i%len(ms)]
				if e := c.Heartbeat(m.group, 1, m.id); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}
