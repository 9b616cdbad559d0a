package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
				results := make(chan joinResult, 100)
				for range 100 {
					c.Join(JoinRequest{Group: name, ClientID: "bench", ProtocolType: "consumer",
						Protocols: []groupProtocol{{name: "range"}}, Session: 30 * time.Second, Rebalance: 30 * time.Second},
						func(r joinResult) { results <- r })
				}
				var ids []string
				for range 100 {
					r := <-results // after the initial delay
					require.Nil(b, r.err)
					ids = append(ids, r.memberID)
				}
				synced := make(chan syncResult, 100)
				for i := len(ids) - 1; i >= 0; i-- {
					c.Sync(name, 1, ids[i], nil, nil, map[string][]byte{}, func(r syncResult) { synced <- r })
				}
				for range 100 {
					require.Nil(b, (<-synced).err)
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
