// Command produce_fetch is a small in-memory broker that parks produce and
// fetch requests in two purgatories, as Kafka's ReplicaManager does. By
// default it runs a self-contained scenario for a few seconds and prints a
// summary; with -listen it serves the broker over HTTP instead. See
// README.md beside this file.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	var c ScenarioConfig
	var topics, listenAddr string
	flag.StringVar(&listenAddr, "listen", "", "serve the broker over HTTP at this address (e.g. 127.0.0.1:8080) instead of running the scenario")
	flag.DurationVar(&c.Duration, "duration", 3*time.Second, "how long the scenario runs")
	flag.Float64Var(&c.ProduceRate, "produce-rate", 2000, "produce requests per second")
	flag.StringVar(&topics, "topics", "orders,payments", "comma-separated topics")
	flag.IntVar(&c.Partitions, "partitions", 4, "partitions per topic")
	flag.IntVar(&c.Replicas, "replicas", 2, "followers per partition")
	flag.DurationVar(&c.Lag, "follower-lag", 2*time.Millisecond, "how far followers trail the leader")
	flag.DurationVar(&c.SlowLag, "slow-lag", 600*time.Millisecond, "lag of the one slow follower (partition 0 of the first topic)")
	flag.DurationVar(&c.ProduceTimeout, "produce-timeout", 500*time.Millisecond, "acks=all produce timeout")
	flag.DurationVar(&c.MaxWait, "max-wait", 500*time.Millisecond, "consumers' fetch max wait")
	flag.Int64Var(&c.MinBytes, "min-bytes", 64, "consumers' fetch min bytes")
	flag.Parse()
	c.Topics = strings.Split(topics, ",")
	if c.ProduceRate <= 0 || c.Duration <= 0 {
		fmt.Fprintln(os.Stderr, "produce_fetch: -produce-rate and -duration must be positive")
		os.Exit(2)
	}

	if listenAddr != "" {
		b, err := NewBroker(BrokerConfig{Topics: c.Topics, Partitions: c.Partitions, Replicas: c.Replicas, Lag: c.Lag})
		if err != nil {
			fmt.Fprintln(os.Stderr, "produce_fetch:", err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		srv := &http.Server{Addr: listenAddr, Handler: NewServer(b), ReadHeaderTimeout: 5 * time.Second}
		err = Serve(ctx, b, srv, func(addr string) {
			fmt.Printf("serving %d partitions on http://%s (Ctrl-C to stop)\n", len(b.Partitions()), addr)
		})
		if err != nil && err != http.ErrServerClosed {
			fmt.Fprintln(os.Stderr, "produce_fetch:", err)
			os.Exit(1)
		}
		fmt.Println("stopped; every parked request was answered")
		return
	}

	c.Progress = os.Stdout
	fmt.Printf("scenario: %v, %.0f produce/s, %d topics x %d partitions, %d followers each; follower 1 of %s-0 lags %v (produce timeout %v)\n",
		c.Duration, c.ProduceRate, len(c.Topics), c.Partitions, c.Replicas, c.Topics[0], c.SlowLag, c.ProduceTimeout)
	s, err := RunScenario(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "produce_fetch:", err)
		os.Exit(1)
	}
	s.Print(os.Stdout)
}

func listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
