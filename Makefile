# purgatory-go: every target installs what it needs through the Go module proxy.
# Five modules: the library (.), examples/, contrib/timing,
# contrib/prometheus and contrib/otel, each with its own go.mod so that what
# the examples need (franz-go) and what the adapters need (client_golang,
# OpenTelemetry) stay out of the library's dependencies, and the adapters
# out of its API. Targets that build, vet, test or lint run in all five.
GO        ?= go
PKGS      := ./...
MODULES   := . examples contrib/timing contrib/prometheus contrib/otel lincheck
# each runs a command in every module, stopping at the first failure.
each = set -e; for m in $(MODULES); do echo "== module $$m"; (cd $$m && $(1)); done
FUZZTIME  ?= 30s
BENCHTIME ?= 1s

.PHONY: all deps build test race vet lint icount icount-write fuzz bench bench-observers bench-expiry perf perf-ratio demo broker longpoll redis queue tidy-check clean lincheck

all: lint build test

deps:
	@$(call each,$(GO) mod download)

build: deps
	@$(call each,$(GO) build $(PKGS))

vet: deps
	@$(call each,$(GO) vet $(PKGS))

# test: vet, then every test under the race detector. Each package's TestMain
# runs goleak, so a leaked goroutine fails the run. The race detector slows
# the largest lifecycle tests tenfold, so they run scaled down under it and
# then once more at full size (a million operations, -full) without it.
STORMS := TestLifecycleStorm|TestKeyChurnReleasesKeys|TestParkRacingForceComplete|TestCompleteNeverStrandsAClaim|TestCompleteRacingCompleteForKey
test: vet
	@$(call each,$(GO) test -race -count=1 -timeout 15m $(PKGS))
	$(GO) test -count=1 -timeout 10m -run '^($(STORMS))$$' ./purgatory -args -full

# lincheck: the linearizability check (module lincheck) for longer than
# make test runs it: each workload for LINCHECK_DURATION, without the race
# detector so that more histories run. LINCHECK_RUN picks workloads
# (e.g. 'TestPurgatory/reset').
LINCHECK_DURATION ?= 2m
LINCHECK_RUN      ?= .
lincheck: deps
	cd lincheck && $(GO) test -run '$(LINCHECK_RUN)' -count=1 -timeout 60m -v . -args -lincheck.duration=$(LINCHECK_DURATION)

# icount: the instructions per iteration of each hot path's benchmark,
# counted by valgrind, against icount.txt; fails when a path counts more
# than 3% above its row (scripts/icount.sh; icount-write rewrites the rows).
icount: deps
	bash scripts/icount.sh

icount-write: deps
	bash scripts/icount.sh -write

# lint: formatting, vet, go.mod drift, and staticcheck (fetched through the
# module proxy with go run, so nothing is installed by hand).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: vet tidy-check
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(call each,$(GO) run $(STATICCHECK) $(PKGS))

# tidy-check fails when go mod tidy would change a module's go.mod or go.sum,
# and leaves them as they were.
tidy-check:
	@$(call each,cp go.mod go.mod.bak && cp go.sum go.sum.bak && $(GO) mod tidy && \
		if cmp -s go.mod go.mod.bak && cmp -s go.sum go.sum.bak; then rm go.mod.bak go.sum.bak; \
		else echo "go.mod/go.sum drift in $$m: run go mod tidy there"; mv go.mod.bak go.mod; mv go.sum.bak go.sum; exit 1; fi)

# fuzz: a bounded run of each fuzz target.
fuzz: deps
	$(GO) test -run '^$$' -fuzz '^FuzzModel$$' -fuzztime $(FUZZTIME) ./internal/core
	$(GO) test -run '^$$' -fuzz '^FuzzDivisor$$' -fuzztime $(FUZZTIME) ./internal/core

# bench: micro-benchmarks, then the whole-round benchmarks (one round each).
bench: deps
	@$(call each,$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -skip 'Expiry|HeapPer' $(PKGS))
	$(MAKE) bench-expiry

# bench-observers: the observers' CPU per request in perf run C's workload,
# as ratios to no observer in the same run (docs/observing.md).
bench-observers: deps
	cd contrib/otel && $(GO) test -run '^$$' -bench 'ObserverCost|UnsampledCallbacks' -benchtime 400000x -count 6 .

# Whole-round benchmarks run one implementation per process: a round leaves
# a large heap and many goroutines behind, which would tax the next one.
bench-expiry: deps
	$(GO) test -run '^$$' -bench 'Expiry/impl=wheel' -benchtime 1x ./timer
	$(GO) test -run '^$$' -bench 'Expiry/impl=runtime' -benchtime 1x ./timer
	$(GO) test -run '^$$' -bench 'HeapPerPendingTask/impl=wheel' -benchtime 1x ./timer
	$(GO) test -run '^$$' -bench 'HeapPerPendingTask/impl=runtime' -benchtime 1x ./timer
	$(GO) test -run '^$$' -bench 'HeapPerParked' -benchtime 1x ./purgatory

# perf: Kafka's TestPurgatoryPerformance runs C, D and E against the naive
# reference, medians of 3 (about five minutes; E waits out 30 s timeouts).
perf: deps
	bash examples/purgatory_perf/runs.sh 3

# perf-ratio: runs C and D interleaved with the naive reference, fresh
# processes on a quiet machine, and the same-run ratios the project is judged by.
perf-ratio: deps
	bash examples/purgatory_perf/perf-ratio.sh 3

demo: deps
	cd examples && $(GO) run ./produce_fetch

# broker: the example broker speaking Kafka's protocol on 127.0.0.1:9092,
# with the demo's topics, until Ctrl-C. It prints kcat commands to try, and
# serves its HTTP front end, with Prometheus metrics at /metrics, beside it.
# It is built and then exec'd, not run with go run: go run exits 1 when
# interrupted whatever the program returns, so make would report Ctrl-C as
# an error. The broker itself exits 0 once it has answered what was parked.
BROKER_ADDR ?= 127.0.0.1:9092
BROKER_HTTP ?= 127.0.0.1:8080
BROKER_BIN  ?= $(or $(TMPDIR),/tmp)/purgatory-produce_fetch
broker: deps
	cd examples && $(GO) build -o $(BROKER_BIN) ./produce_fetch
	exec $(BROKER_BIN) -kafka $(BROKER_ADDR) -listen $(BROKER_HTTP)

# longpoll: the long-poll HTTP server of examples/longpoll on 127.0.0.1:8080
# until Ctrl-C, built and exec'd as broker is. It exits 0 once it has
# answered every parked poll. Alone and in memory, unless LONGPOLL_REDIS
# names a Redis (host:port) it then shares its keys through with other
# servers: make longpoll LONGPOLL_ADDR=127.0.0.1:8081 LONGPOLL_REDIS=127.0.0.1:6390
# It does not depend on deps: go build fetches what this one program
# needs, not every module of the repository.
LONGPOLL_ADDR  ?= 127.0.0.1:8080
LONGPOLL_REDIS ?=
LONGPOLL_BIN   ?= $(or $(TMPDIR),/tmp)/purgatory-longpoll
longpoll:
	cd examples && $(GO) build -o $(LONGPOLL_BIN) ./longpoll
	exec $(LONGPOLL_BIN) -addr $(LONGPOLL_ADDR) $(if $(LONGPOLL_REDIS),-redis $(LONGPOLL_REDIS))

# redis: a redis-server for the long poll's servers to share, until Ctrl-C,
# on a port of its own (not 6379, where a packaged Redis may already be)
# and with its append-only file in a directory of its own outside the
# repository, so that it keeps its keys across a restart and leaves
# nothing in git status.
REDIS_PORT ?= 6390
REDIS_DIR  ?= $(or $(TMPDIR),/tmp)/purgatory-redis
redis:
	mkdir -p $(REDIS_DIR)
	exec redis-server --bind 127.0.0.1 --port $(REDIS_PORT) --dir $(REDIS_DIR) --appendonly yes --save ''

# queue: the SQS-like queue of examples/queue on 127.0.0.1:8081 until
# Ctrl-C, built and exec'd as longpoll is. It exits 0 once it has answered
# every parked receive (with no messages).
QUEUE_ADDR ?= 127.0.0.1:8081
QUEUE_BIN  ?= $(or $(TMPDIR),/tmp)/purgatory-queue
queue:
	cd examples && $(GO) build -o $(QUEUE_BIN) ./queue
	exec $(QUEUE_BIN) -addr $(QUEUE_ADDR)

clean:
	$(GO) clean -testcache
