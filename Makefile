# meshloc — the commands the README and CI use. `make test` is what .ci/run runs.

GO      ?= go
TIMEOUT ?= 20m
# The chaos tier: about 17 minutes, more when a planted bug's trigger takes
# many runs (internal/chaos Plant.runs).
CHAOS_TIMEOUT ?= 35m

# The compose cluster (docker-compose.yml). COMPOSE is `docker compose` where
# that plugin exists, else Debian's `docker-compose`; override it as you like.
DOCKER  ?= docker
COMPOSE ?= $(shell $(DOCKER) compose version >/dev/null 2>&1 && echo '$(DOCKER) compose' || echo docker-compose)
IMAGE   ?= meshloc:dev
# The image context (Dockerfile, .dockerignore): static binaries and the
# empty directories the processes write to.
DOCKER_CTX = build/docker
# The revision --version prints when the toolchain stamps none
# (GOFLAGS=-buildvcs=false).
REVISION  := $(shell git rev-parse --short HEAD 2>/dev/null)
VERSIONLD  = -X github.com/meshloc/meshloc/internal/cliutil.Revision=$(REVISION)
STATIC     = CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(VERSIONLD)'

.PHONY: all build test test-race vet fmt clean proto docker-bin images certs cluster-up cluster-down test-compose bench bench-micro fuzz scale docs

all: build

## build: every binary into bin/
build:
	$(GO) build -ldflags='$(VERSIONLD)' -o bin/ ./cmd/...

## vet: static checks of every package, and of bench/peers (meshctl bench
## --only peers' Proto.Actor peer: a module of its own, so that meshloc's
## go.mod does not depend on protoactor-go)
vet:
	$(GO) vet ./...
	$(GO) -C bench/peers vet ./...

## test: vet, then every test once (no cache), bounded by $(TIMEOUT); then
## the tests that need the failpoints build tag: the relocation fault tests,
## the planted-bug tests; then every fuzz target for $(FUZZTIME) each
## (fuzz); and last test/chaos, the verification suite's CI
## tier (a checked run per workload with its faults, and the planted-bug
## self-test), verbose so that every run's report is printed
## (pkg/node/*_fault_test.go; docs/seed-bugs.md; docs/verification.md);
## last the compose cluster's fault test (test-compose; skipped without docker
## unless CI=true). bench/peers is built first: internal/bench's test of the
## peers section builds it again (from the build cache).
test: vet
	$(GO) -C bench/peers build -o /dev/null .
	$(GO) test -count=1 -timeout $(TIMEOUT) $$($(GO) list ./... | grep -v /test/chaos)
	$(GO) vet -tags failpoints ./pkg/node/ ./internal/failpoint/ ./internal/chaos/ ./internal/locationd/recovery/ ./pkg/... ./cmd/... ./test/chaos/
	$(GO) test -count=1 -timeout $(TIMEOUT) -tags failpoints -run 'Fault|SeedBug|Planted' ./pkg/node/
	$(GO) test -count=1 -tags failpoints ./internal/failpoint/
	$(GO) test -count=1 -tags failpoints -run 'Planted|DeadlineNeverPastExpiry|AcceptRefusesOlderFence' ./pkg/lease/ ./pkg/client/ ./pkg/relocation/ ./pkg/authority/ ./internal/locationd/recovery/
	$(MAKE) --no-print-directory fuzz
	$(GO) test -count=1 -timeout $(CHAOS_TIMEOUT) -tags failpoints -v ./test/chaos/
	$(MAKE) --no-print-directory test-compose

## test-race: the same under the race detector (about twice as slow on 2 cores)
test-race: vet
	$(GO) test -race -count=1 -timeout 40m ./...

## fuzz: every fuzz target of FUZZ_TARGETS ("package FuzzName" pairs: the
## decoders of bytes from outside the process), one go test -fuzz each, for
## $(FUZZTIME) each, new inputs minimised for at most $(FUZZMINIMIZE) (go's
## default of 60 s can spend a short run on one input): about 3 minutes on
## 2 cores, 4.5 with a cold build cache (-fuzz builds every dependency
## again, instrumented). It first fails if a Fuzz function of the
## repository is missing from the list, or the list names one its package
## lacks; then it runs them all and fails if any failed (the failing input
## is written to its package's testdata/fuzz/<FuzzName>/: keep it there as
## a seed once fixed). A run that ends with go's "context deadline exceeded"
## and wrote no failing input is the fuzz time running out while the engine
## was busy (a known go flake), not a failure. Longer runs: make fuzz
## FUZZTIME=5m.
FUZZTIME     ?= 10s
FUZZMINIMIZE ?= 2s
FUZZ_TARGETS = \
	./pkg/actor/                  FuzzDecodeTimers \
	./pkg/actor/                  FuzzDecodeReplyTable \
	./pkg/actor/                  FuzzDecodeOutbox \
	./pkg/actor/builtin/          FuzzRestore \
	./pkg/actor/builtin/          FuzzHandle \
	./pkg/record/                 FuzzDecodeRecordMatchesStd \
	./pkg/record/                 FuzzEncodeMatchesStd \
	./pkg/record/                 FuzzDecodeBulkIntent \
	./pkg/wire/                   FuzzCallRequest \
	./pkg/wire/                   FuzzRelocationFrame \
	./pkg/wire/                   FuzzParseOperationID \
	./pkg/wire/                   FuzzParseRoutingIDHex \
	./pkg/wire/                   FuzzParseRelocationID \
	./pkg/wire/transport/         FuzzChunkFrame \
	./pkg/reminder/               FuzzParseArgs \
	./pkg/reminder/               FuzzDecodeEntry \
	./pkg/wire/transport/         FuzzChunkFrameRoundTrip \
	./pkg/relocation/             FuzzAssembly \
	./pkg/relocation/             FuzzRebase \
	./pkg/relocation/             FuzzDecodePayload \
	./pkg/keyspace/               FuzzParseObject \
	./pkg/lease/                  FuzzDecodeDescriptor \
	./pkg/node/durable/           FuzzDecodeDurableState \
	./pkg/node/pacing/            FuzzPacingMetadata \
	./pkg/session/                FuzzJournalOf \
	./pkg/client/                 FuzzParseToken \
	./pkg/client/                 FuzzSSEReader \
	./internal/locationd/         FuzzRequestBodies \
	./internal/locationd/         FuzzEventsQuery \
	./pkg/tracing/                FuzzTraceparent
fuzz:
	@missing=; for f in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' cmd internal pkg test | sed 's/^func //' | sort -u); do \
	  case " $$(echo $(FUZZ_TARGETS)) " in *" $$f "*) ;; *) missing="$$missing $$f";; esac; \
	done; \
	if [ -n "$$missing" ]; then echo "fuzz: not in FUZZ_TARGETS (Makefile):$$missing" >&2; exit 1; fi
	@set -- $(FUZZ_TARGETS); \
	while [ $$# -ge 2 ]; do \
	  grep -qE "^func $$2\(" $$1*_test.go || { echo "fuzz: FUZZ_TARGETS (Makefile) names $$2 in $$1, which has no such Fuzz function" >&2; exit 1; }; \
	  shift 2; \
	done
	@set -- $(FUZZ_TARGETS); failed=; n=0; \
	while [ $$# -ge 2 ]; do \
	  pkg=$$1; name=$$2; shift 2; n=$$((n+1)); \
	  echo "fuzz: $$pkg $$name for $(FUZZTIME)"; \
	  out=$$(mktemp); \
	  if $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg >$$out 2>&1; then cat $$out; \
	  elif grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input written' $$out; then \
	    cat $$out; echo "fuzz: $$pkg $$name: the fuzz time ran out while the engine was busy (go's 'context deadline exceeded'), no failing input: passed"; \
	  else cat $$out; echo "fuzz: FAILED: $$pkg $$name" >&2; failed="$$failed $$pkg:$$name"; fi; \
	  rm -f $$out; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: FAILED:$$failed (failing inputs in each package's testdata/fuzz/)" >&2; exit 1; fi; \
	echo "fuzz: all $$n targets passed"

## docs: regenerate the references of docs/reference/ from the code: the
## command-line reference (cobra's generator, from the commands) and the
## metrics reference (from the registries). make test fails while one is
## stale (the same tests, without MESHLOC_WRITE_DOCS).
DOC_TESTS = ./cmd/meshctl/ ./cmd/locationd/ ./pkg/meshnode/ ./pkg/node/ ./internal/locationd/
docs:
	MESHLOC_WRITE_DOCS=1 $(GO) test -count=1 -run 'TestCLIReference|TestMetricsReference' $(DOC_TESTS)

## fmt: gofmt every file in place
fmt:
	gofmt -w $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')

## proto: regenerate pkg/wire from proto/ (buf.yaml, buf.gen.yaml). buf and the
## protoc plugins run with `go tool` from the separate tools/ module, so the
## product's go.mod lists only what it runs (docs/contributing.md, "Wire").
BUF = $(GO) tool -modfile=tools/go.mod buf
proto:
	$(BUF) lint
	$(BUF) generate

## bench: meshctl bench, the full plan (about 3 minutes): meshloc beside its
## baselines measured in the same run, each target marked met or not
## (README "Performance"); BENCH_FLAGS=--quick for the quick plan
bench:
	$(GO) run ./cmd/meshctl bench $(BENCH_FLAGS)

## scale: the scale model (test/scale; not in CI): a million objects over 8
## meshnode processes, a rolling restart of every node under a checked load,
## then a kill -9 of one; it prints each step's figures beside an etcd CAS
## rate and checks that nothing acknowledged was lost and nothing ran twice.
## Then meshctl bench --only scale (every scale figure with its target).
## About an hour on 2 cores; SCALE_FLAGS=-objects=100000 for a smaller model.
scale:
	$(GO) build -o build/scale/ ./cmd/locationd ./cmd/meshnode ./cmd/meshctl
	$(GO) run ./test/scale -bin build/scale $(SCALE_FLAGS)
	./build/scale/meshctl bench --only scale $(SCALE_BENCH_FLAGS)

## bench-micro: the micro-benchmarks of the codec, chunk assembly and the
## relocation state machine step
bench-micro:
	$(GO) test -run '^$$' -bench 'Codec|Assembly|SourceTargetStep' ./pkg/wire/transport/ ./pkg/relocation/

## docker-bin: static binaries (CGO_ENABLED=0) of etcd and etcdctl (from their
## Go modules, the versions of go.mod), locationd, meshnode and meshctl into
## build/docker/bin/, and the image's empty directories into build/docker/rootfs/
docker-bin:
	mkdir -p $(DOCKER_CTX)/bin $(DOCKER_CTX)/rootfs/var/lib/etcd $(DOCKER_CTX)/rootfs/tmp
	chmod 0700 $(DOCKER_CTX)/rootfs/var/lib/etcd
	chmod 1777 $(DOCKER_CTX)/rootfs/tmp
	$(STATIC) -o $(DOCKER_CTX)/bin/etcd go.etcd.io/etcd/server/v3
	$(STATIC) -o $(DOCKER_CTX)/bin/ go.etcd.io/etcd/etcdctl/v3 ./cmd/locationd ./cmd/meshnode ./cmd/meshctl

## images: docker-bin, then the image $(IMAGE) FROM scratch (Dockerfile): no registry needed
images: docker-bin
	$(DOCKER) build -t $(IMAGE) .

## certs: the compose cluster's certificates in $(CERTS), made once (meshctl
## certs init refuses to overwrite). The containers run as 65532, so the keys
## are made readable by every local user: a development cluster's keys.
CERTS ?= build/certs
certs: $(CERTS)/ca.crt
$(CERTS)/ca.crt:
	$(GO) run ./cmd/meshctl certs init --dir $(CERTS) --nodes meshnode1,meshnode2,meshnode3 \
	  --locationd locationd1,locationd2 --etcd etcd1,etcd2,etcd3 --hosts localhost,127.0.0.1 >/dev/null
	chmod a+r $(CERTS)/*.key

## cluster-up: images and certs, then the compose cluster (etcd1..3,
## locationd1..2, meshnode1..3, secured; docker-compose.yml), and wait until
## every service is healthy
cluster-up: images certs
	MESHLOC_IMAGE=$(IMAGE) MESHLOC_CERTS=$(abspath $(CERTS)) $(COMPOSE) up -d
	@echo "waiting for every service to be healthy (at most 3 minutes)"; \
	for i in $$(seq 180); do \
	  ids=$$($(COMPOSE) ps -q); \
	  bad=$$(for id in $$ids; do $(DOCKER) inspect -f '{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' $$id; done | grep -v ' healthy$$'); \
	  if [ -n "$$ids" ] && [ -z "$$bad" ]; then MESHLOC_IMAGE=$(IMAGE) MESHLOC_CERTS=$(abspath $(CERTS)) $(COMPOSE) ps; exit 0; fi; \
	  sleep 1; \
	done; \
	MESHLOC_IMAGE=$(IMAGE) MESHLOC_CERTS=$(abspath $(CERTS)) $(COMPOSE) ps; echo "cluster-up: not healthy after 3 minutes:$$bad (see: $(COMPOSE) logs)" >&2; exit 1

## cluster-down: stop the compose cluster and delete its containers, network
## and volumes (etcd's data); the image stays (docker rmi $(IMAGE))
cluster-down:
	MESHLOC_IMAGE=$(IMAGE) MESHLOC_CERTS=$(abspath $(CERTS)) $(COMPOSE) down -v --remove-orphans

## test-compose: test/compose, the compose cluster under faults (docker kill,
## pause, network disconnect of meshnodes, docker stop of an etcd member). It
## builds its own static binaries and image, runs its own compose project on
## free loopback ports, and removes all of it at the end
test-compose:
	$(GO) vet -tags compose ./test/compose/
	MESHLOC_COMPOSE='$(COMPOSE)' $(GO) test -count=1 -timeout 15m -tags compose -v ./test/compose/

clean:
	rm -rf bin/ build/
