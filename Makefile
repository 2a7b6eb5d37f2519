# Quittance. `make run` serves on an embedded PostgreSQL; `make test` runs
# the whole suite against real PostgreSQL. Both need only Go and the
# machine's PostgreSQL binaries (installed with apt-get when missing and root).

GO        ?= go
GOTEST    ?= $(GO) test -race -count=1
PGTESTENV  = $(GO) run ./sql/pgtest/pgtestenv

.PHONY: run test test-go test-deploy test-kit generate verify-generated vet fmt-check prometheus check-rules fuzz bench bench-failover soak

## run: serve on the embedded default (a private PostgreSQL cluster under ./.quittance)
# The binary is built to a git-ignored path and exec'd; the service takes
# the terminal's foreground, so Ctrl-C reaches it alone, and it shuts down
# cleanly and exits 0 (cmd/quittance/foreground_linux.go).
QUITTANCE_BIN ?= bin/quittance
run:
	@echo "Building $(QUITTANCE_BIN) from ./cmd/quittance (the first build compiles every dependency and can take a few minutes)..."
	@$(GO) build -o $(QUITTANCE_BIN) ./cmd/quittance
	@echo "Starting $(QUITTANCE_BIN) dev; Ctrl-C stops it"
	@exec $(QUITTANCE_BIN) dev

## test: the whole suite against a throwaway PostgreSQL cluster
test: vet test-go test-deploy test-kit

test-go:
	$(PGTESTENV) $(GOTEST) -timeout 15m ./...

test-deploy:
	cd deploy && $(GO) test -count=1 ./...

## test-kit: the compensation kit for remote orgs and its test against Quittance (modules of their own)
test-kit:
	cd compensation/kit && $(GO) vet ./... && $(GOTEST) ./...
	cd compensation/kit/interop && $(GO) vet ./... && $(GOTEST) ./...

## generate: regenerate the sqlc code from sql/migrations and sql/queries
generate:
	$(GO) tool sqlc generate

## verify-generated: fail when the committed sqlc output is stale
verify-generated:
	$(GO) tool sqlc diff

STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

## prometheus: install prometheus and promtool (Debian package, as root) when missing;
## the Prometheus integration test installs them the same way
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || $(GO) run ./dashboards/promtest/promtestinstall

## check-rules: promtool checks of the alert rules and their unit tests
check-rules: prometheus
	promtool check rules dashboards/alerts/quittance.rules.yaml
	cd dashboards/alerts && promtool test rules quittance.rules.test.yaml

## fuzz: run each fuzz target for a bounded time (FUZZTIME, default 30s)
FUZZTIME ?= 30s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$target"; \
	    $(PGTESTENV) $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## bench: pgbench vs. the Quittance lifecycle (8 and 32 clients; many budgets
## against pgbench at scale 32, one hot budget against scale 1), three
## replicas beside one, and reconciliation, the console's obligations page
## (server-side p99) and the deadline sweep at 10M
## delegations generated with SQL, on one private PostgreSQL (BENCH_QUICK=1 for
## a short run whose figures are not the benchmark's; BENCH_FLAGS for more)
BENCH_QUICK ?=
BENCH_FLAGS ?=
bench:
	$(GO) run ./cmd/quittance-bench bench $(if $(filter 1 yes true,$(BENCH_QUICK)),-quick) $(BENCH_FLAGS)

## bench-failover: a primary and its streaming standby (the machine's binaries):
## time from the primary's kill to the first write, acknowledged answers lost
## with synchronous and asynchronous replication, and the lifecycle's
## throughput beside a 100,000-row CSV export read from the primary or the
## standby (BENCH_QUICK=1 for a short run; BENCH_FAILOVER_FLAGS for more)
BENCH_FAILOVER_FLAGS ?=
bench-failover:
	$(GO) run ./cmd/quittance-bench failover $(if $(filter 1 yes true,$(BENCH_QUICK)),-quick) $(BENCH_FAILOVER_FLAGS)

## soak: concurrent lifecycle on REPLICAS service processes (default 1) with the
## demo agent as the remote, under SIGKILLs of random replicas and immediate
## PostgreSQL restarts, then every invariant checked (SOAK_DURATION, at most 10m)
SOAK_DURATION ?= 5m
REPLICAS      ?= 1
SOAK_FLAGS    ?=
soak:
	$(GO) run ./cmd/quittance-bench soak -duration $(SOAK_DURATION) -replicas $(REPLICAS) $(SOAK_FLAGS)
