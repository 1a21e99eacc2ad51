# meshloc — the commands the README and CI use. `make test` is what .ci/run runs.

GO      ?= go
TIMEOUT ?= 20m

.PHONY: all build test test-race vet fmt clean proto

all: build

## build: every binary into bin/
build:
	$(GO) build -o bin/ ./cmd/...

## vet: static checks of every package
vet:
	$(GO) vet ./...

## test: vet, then every test once (no cache), bounded by $(TIMEOUT); then
## the tests that need the failpoints build tag: the relocation fault tests,
## the planted-bug tests, and last test/chaos, the verification suite's CI
## tier (a checked run per workload with its faults, and the planted-bug
## self-test), verbose so that every run's report is printed
## (internal/node/*_fault_test.go; docs/seed-bugs.md; docs/verification.md)
test: vet
	$(GO) test -count=1 -timeout $(TIMEOUT) $$($(GO) list ./... | grep -v /test/chaos)
	$(GO) vet -tags failpoints ./internal/node/ ./internal/failpoint/ ./internal/chaos/ ./pkg/... ./cmd/... ./test/chaos/
	$(GO) test -count=1 -timeout $(TIMEOUT) -tags failpoints -run 'Fault|SeedBug|Planted' ./internal/node/
	$(GO) test -count=1 -tags failpoints ./internal/failpoint/
	$(GO) test -count=1 -tags failpoints -run 'Planted|DeadlineNeverPastExpiry|AcceptRefusesOlderFence' ./pkg/lease/ ./pkg/client/ ./pkg/relocation/ ./pkg/authority/
	$(GO) test -count=1 -timeout $(TIMEOUT) -tags failpoints -v ./test/chaos/

## test-race: the same under the race detector (about twice as slow on 2 cores)
test-race: vet
	$(GO) test -race -count=1 -timeout 40m ./...

## fmt: gofmt every file in place
fmt:
	gofmt -w $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')

## proto: regenerate pkg/wire from proto/ (buf.yaml, buf.gen.yaml). buf and the
## protoc plugins run with `go tool` from the separate tools/ module, so the
## product's go.mod lists only what it runs (CONVENTIONS.md, "Wire").
BUF = $(GO) tool -modfile=tools/go.mod buf
proto:
	$(BUF) lint
	$(BUF) generate

clean:
	rm -rf bin/
