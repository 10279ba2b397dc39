# keel — build, run and test targets. `make run` starts a dev node; `make test` runs
# the whole test suite (what CI runs). Long chaos and soak runs have their own targets.

GO        ?= go
BIN       ?= bin/keel
PKGS      ?= ./...
FUZZTIME  ?= 20s
DURATION  ?= 10m
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/keel-kv/keel/internal/buildinfo.Release=$(VERSION)

.PHONY: build run test test-race bench bench-compare fuzz lint chaos chaos-soak image clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/keel

# A one-node dev server with its data in a fresh temporary directory (printed at start).
run: build
	./$(BIN) agent -dev -schema docs/examples/widgets-v2.yaml

# Unit, cluster (real Raft over loopback TCP) and HTTP tests; about 5 minutes on 2 cores.
test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 15m $(PKGS)

# The state machine and token code under the race detector.
test-race:
	$(GO) test -race -count=1 -timeout 15m ./fsm/ ./kv/...

# In-process benchmarks: the state machine, tokens, and a real 3-node cluster on loopback
# (writes/s at 1 and 64 clients, linearizable reads/s). Figures land in bench/results-unit.txt.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./fsm/ ./kv/ | tee bench/results-unit.txt
	$(GO) test -run '^$$' -bench Cluster -benchtime 5000x -count 1 ./raft/ | tee -a bench/results-unit.txt

# keel vs etcd on the same machine, 3 nodes each on loopback (installs etcd-server).
bench-compare: build
	bash bench/compare.sh

# Each fuzz target for FUZZTIME; new interesting inputs land in testdata/fuzz.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GO) vet $(PKGS)
	staticcheck $(PKGS)

# Fault-injection scenarios over real keel processes (and containers when Docker answers).
chaos: build
	KEEL_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 25m -tags chaos ./chaos/ -run . -v

chaos-soak: build
	KEEL_BIN=$(CURDIR)/$(BIN) KEEL_SOAK_DURATION=$(DURATION) $(GO) test -count=1 -timeout 0 -tags chaos ./chaos/ -run TestSoak -v

# A FROM-scratch image of the static binary (no image is pulled).
image: build
	docker build -t keel:$(VERSION) -t keel:dev -f Dockerfile .

clean:
	rm -rf bin
