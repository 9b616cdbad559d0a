// Command produce_fetch is a single-node, in-memory Kafka broker that parks
// produce, fetch and DeleteRecords requests in purgatories, as Kafka's
// ReplicaManager does, and consumer groups' waits, as its group
// coordinator does. By default it runs a self-contained scenario for a
// few seconds and prints a summary; with -kafka it serves Kafka clients
// (kcat, franz-go, ...), and with -listen it serves the same broker over
// HTTP. See README.md beside this file.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/kafkawire"
)

func main() {
	var c ScenarioConfig
	var topics, listenAddr, kafkaAddr, advertise string
	var maxRequestBytes int
	var status bool
	flag.StringVar(&listenAddr, "listen", "", "serve the broker over HTTP at this address (e.g. 127.0.0.1:8080) instead of running the scenario")
	flag.StringVar(&kafkaAddr, "kafka", "", "serve the broker to Kafka clients at this address (e.g. 127.0.0.1:9092) instead of running the scenario")
	flag.StringVar(&advertise, "advertise", "", "with -kafka: the host:port Metadata gives clients (default: the listening address)")
	flag.IntVar(&maxRequestBytes, "max-request-bytes", 100<<20, "with -kafka: the largest request accepted (Kafka's socket.request.max.bytes)")
	flag.BoolVar(&status, "status", true, "with -kafka or -listen: show a live status line of both purgatories")
	flag.DurationVar(&c.Duration, "duration", 3*time.Second, "how long the scenario runs")
	flag.Float64Var(&c.ProduceRate, "produce-rate", 2000, "scenario: produce requests per second")
	flag.StringVar(&topics, "topics", "orders,payments", "comma-separated topics")
	flag.IntVar(&c.Partitions, "partitions", 4, "partitions per topic")
	flag.IntVar(&c.Replicas, "replicas", 2, "followers per partition")
	flag.DurationVar(&c.Lag, "follower-lag", 2*time.Millisecond, "how long a follower takes to append what it fetched, before its next fetch")
	flag.DurationVar(&c.SlowLag, "slow-lag", 600*time.Millisecond, "lag of the one slow follower (follower 1 of partition 0 of the first topic)")
	flag.DurationVar(&c.ReplicaLagMax, "replica-lag-max", 30*time.Second, "a follower not caught up for this long leaves the in-sync replicas (Kafka's replica.lag.time.max.ms); 0: never")
	flag.DurationVar(&c.ProduceTimeout, "produce-timeout", 500*time.Millisecond, "acks=all produce timeout: the scenario's, and HTTP's when a body has no timeout_ms")
	flag.DurationVar(&c.MaxWait, "max-wait", 500*time.Millisecond, "fetch max wait: the scenario's consumers', and HTTP's when a fetch has no max_wait_ms")
	flag.Int64Var(&c.MinBytes, "min-bytes", 64, "scenario: consumers' fetch min bytes")
	flag.DurationVar(&c.Groups.InitialRebalanceDelay, "group-initial-rebalance-delay", 3*time.Second,
		"with -kafka: how long the first rebalance of an empty group waits for more members (Kafka's group.initial.rebalance.delay.ms)")
	flag.DurationVar(&c.Groups.MinSessionTimeout, "group-min-session-timeout", 6*time.Second,
		"with -kafka: the shortest session timeout a group member may ask for (Kafka's group.min.session.timeout.ms)")
	flag.DurationVar(&c.Groups.MaxSessionTimeout, "group-max-session-timeout", 30*time.Minute,
		"with -kafka: the longest session timeout a group member may ask for (Kafka's group.max.session.timeout.ms)")
	flag.BoolVar(&c.Trace, "trace", false, "scenario: trace produce requests and their wait in the purgatory, as JSON on stderr (OpenTelemetry's stdout exporter)")
	traceRatio := flag.Float64("trace-ratio", 0.001, "with -trace: the share of produce requests traced")
	flag.Parse()
	if c.Trace {
		stop, err := startTracing(os.Stderr, *traceRatio)
		if err != nil {
			fmt.Fprintln(os.Stderr, "produce_fetch:", err)
			os.Exit(1)
		}
		defer stop() // main returns normally after the scenario; os.Exit paths lose only traces
	}
	c.Topics = strings.Split(topics, ",")
	if c.ProduceRate <= 0 || c.Duration <= 0 || c.ProduceTimeout <= 0 || c.MaxWait < 0 || c.SlowLag < 0 ||
		c.Groups.InitialRebalanceDelay < 0 || c.Groups.MinSessionTimeout <= 0 || c.Groups.MaxSessionTimeout < c.Groups.MinSessionTimeout {
		fmt.Fprintln(os.Stderr, "produce_fetch: -produce-rate, -duration and -produce-timeout must be positive, -max-wait, -slow-lag and -group-initial-rebalance-delay not negative, and 0 < -group-min-session-timeout <= -group-max-session-timeout")
		os.Exit(2)
	}
	stdoutIsTerminal := isTerminal(os.Stdout)

	if listenAddr != "" || kafkaAddr != "" {
		if err := serve(c, listenAddr, kafkaAddr, advertise, maxRequestBytes, status, stdoutIsTerminal); err != nil {
			fmt.Fprintln(os.Stderr, "produce_fetch:", err)
			os.Exit(1)
		}
		return
	}

	c.Progress, c.ProgressLive = os.Stdout, stdoutIsTerminal
	fmt.Printf("scenario: %v, %.0f produce/s, %d topics x %d partitions, %d followers each; follower 1 of %s-0 lags %v (produce timeout %v)\n",
		c.Duration, c.ProduceRate, len(c.Topics), c.Partitions, c.Replicas, c.Topics[0], c.SlowLag, c.ProduceTimeout)
	s, err := RunScenario(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "produce_fetch:", err)
		os.Exit(1)
	}
	s.Print(os.Stdout)
}

// serve runs the broker behind the front ends asked for until SIGINT or
// SIGTERM, then answers every parked request before returning.
func serve(c ScenarioConfig, listenAddr, kafkaAddr, advertise string, maxRequestBytes int, status, live bool) error {
	b, err := c.newBroker() // with -slow-lag applied, as in the scenario
	if err != nil {
		return err
	}
	parts := b.Partitions()
	var s Servers
	if listenAddr != "" {
		if s.HTTPListener, err = net.Listen("tcp", listenAddr); err != nil {
			_ = b.Close(context.Background())
			return err
		}
		s.HTTP = NewHTTPServer(listenAddr, b, HTTPConfig{ProduceTimeout: c.ProduceTimeout, MaxWait: c.MaxWait})
		fmt.Printf("http: serving %d partitions on http://%s\n", len(parts), s.HTTPListener.Addr())
	}
	if kafkaAddr != "" {
		if s.KafkaListener, err = net.Listen("tcp", kafkaAddr); err != nil {
			if s.HTTPListener != nil {
				s.HTTPListener.Close()
			}
			_ = b.Close(context.Background())
			return err
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		s.Kafka = NewKafkaServer(b, kafkawire.Config{MaxRequestBytes: maxRequestBytes, Advertise: advertise, Logger: logger})
		printKcatHelp(os.Stdout, s.KafkaListener.Addr().String(), c)
	}
	fmt.Println("Ctrl-C to stop; every parked request is answered first.")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	statusDone := make(chan struct{})
	statusCtx, stopStatus := context.WithCancel(ctx)
	go func() {
		defer close(statusDone)
		if status {
			statusLoop(statusCtx, os.Stdout, live, b, s.Kafka)
		}
	}()
	err = ServeAll(ctx, b, s)
	stopStatus()
	<-statusDone
	st := b.Stats()
	fmt.Printf("stopped; every parked request was answered.\n%s\n", statusLine(st, s.Kafka))
	return err
}

func printKcatHelp(w io.Writer, addr string, c ScenarioConfig) {
	t := c.Topics[0]
	fmt.Fprintf(w, "kafka: serving %s x %d partitions on %s. Try, in another terminal:\n", strings.Join(c.Topics, ","), c.Partitions, addr)
	fmt.Fprintf(w, "  # metadata: the leader, replicas and in-sync replicas of each partition\n")
	fmt.Fprintf(w, "  kcat -b %s -L\n", addr)
	fmt.Fprintf(w, "  # acks=all: answered once both followers have the record, a few ms\n")
	fmt.Fprintf(w, "  echo hello | kcat -b %s -P -t %s -p 1 -X acks=all\n", addr, t)
	fmt.Fprintf(w, "  # the same to partition 0, whose follower 1 lags %v\n", c.SlowLag)
	fmt.Fprintf(w, "  echo slow | kcat -b %s -P -t %s -p 0 -X acks=all\n", addr, t)
	fmt.Fprintf(w, "  # a consumer long-polling (5 s per fetch), printing each record as it is produced\n")
	fmt.Fprintf(w, "  kcat -b %s -C -t %s -p 1 -o beginning -X fetch.wait.max.ms=5000\n", addr, t)
	fmt.Fprintf(w, "  # a consumer group: run it in two terminals, and the %d partitions are split between them\n", c.Partitions)
	fmt.Fprintf(w, "  kcat -b %s -G demo %s -X auto.offset.reset=earliest -f '%%t-%%p@%%o: %%s\\n'\n", addr, t)
}

// statusLoop shows statusLine every second: redrawn in place on a terminal,
// otherwise as a new line whenever it changed.
func statusLoop(ctx context.Context, w io.Writer, live bool, b *Broker, ks *kafkawire.Server) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			if live && last != "" {
				fmt.Fprintln(w)
			}
			return
		case <-t.C:
		}
		line := statusLine(b.Stats(), ks)
		switch {
		case live:
			fmt.Fprintf(w, "\r%s\x1b[K", line)
		case line != last:
			fmt.Fprintln(w, line)
		}
		last = line
	}
}

// statusLine is one line of the broker's state: each purgatory's parked
// requests and how the rest were answered, the ISR changes, and clients.
func statusLine(st BrokerStats, ks *kafkawire.Server) string {
	line := fmt.Sprintf("produce: %d parked, %d done early, %d expired | fetch: %d parked, %d done early, %d expired | isr -%d +%d",
		st.Produce.Pending, st.Produce.CompletedEarly, st.Produce.Expired,
		st.Fetch.Pending, st.Fetch.CompletedEarly, st.Fetch.Expired, st.ISRShrinks, st.ISRExpands)
	if st.Groups.Groups > 0 {
		line += fmt.Sprintf(" | groups: %d, %d members, %d rebalancing, %d sessions expired",
			st.Groups.Groups, st.Groups.Members, st.Groups.Join.Pending, st.Groups.Heartbeat.Expired)
	}
	if ks != nil {
		ksStats := ks.Stats()
		line += fmt.Sprintf(" | kafka: %d conns, %d requests", ksStats.Open, ksStats.Requests)
	}
	return line
}

// isTerminal reports whether f is a terminal (a character device), where a
// line can be redrawn with \r; a file or a pipe gets plain lines.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
