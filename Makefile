# sandboxio. `make check` is exactly what CI runs; it builds the sandbox images first if they are missing.
GO       ?= go
GOFILES   = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.data/*')
# A count, not a duration: a duration races the fuzz coordinator's deadline in Go 1.26
# (golang/go#75804, "context deadline exceeded" with no crasher); a count has no deadline.
FUZZTIME ?= 100000x

.PHONY: failover all build check fmt-check vet staticcheck tidy-check test test-auth deps-check images demo dev bench fuzz schemas clean deploy-smoke browser-check

all: build

build:
	$(GO) build -o bin/ ./cmd/...
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/sbx-agent ./cmd/sbx-agent

check: fmt-check vet staticcheck tidy-check deps-check images test test-auth

fmt-check:
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Pinned in the tools module (tools/go.mod and its go.sum): the first run
# fetches it through the module proxy, like any other module.
staticcheck:
	$(GO) tool -modfile=tools/go.mod staticcheck -tags integration ./...

tidy-check:
	$(GO) mod tidy -diff
	cd tools && $(GO) mod tidy -diff

deps-check:
	bash scripts/check-deps.sh
	bash scripts/check-large-files.sh
	bash scripts/check-adr-index.sh
	$(GO) run ./scripts/ctxfields

test:
	$(GO) test -race -count=1 -tags integration -timeout 20m ./...

# The suites built on pkg/sbxtest again, on a real server running the
# account layout: every service with its own creds, the client as a tenant.
AUTHPKGS ?= ./pkg/client/ ./pkg/worker/... ./pkg/sbxtest/ ./test/integration/ ./services/router/ ./services/mcp/ ./services/gateway/e2bapi/ ./test/e2bcompat/

test-auth:
	SBX_TEST_AUTH=1 $(GO) test -race -count=1 -tags integration -timeout 20m $(AUTHPKGS)

images:
	bash deploy/images/build.sh

# Headless Chromium loads a page from a deny-egress sandbox through the ports
# gateway (a WebSocket back to it, a signed link traded for a cookie); it
# checks the DOM and keeps .data/browser-check.png. Skips without chromium.
browser-check: images
	$(GO) test -count=1 -v -run 'TestBrowserCheck$$' ./cmd/sandboxio/cli/

demo: images
	$(GO) run ./cmd/sandboxio demo

dev: images
	$(GO) run ./cmd/sandboxio dev

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./pkg/sbxtest/
	$(GO) test -tags integration -run '^$$' -bench . -benchtime 50x ./services/docker-worker/

FUZZPKGS ?= ./pkg/events ./internal/cemsg ./internal/recsign ./services/auditor ./services/e2b-worker/internal/envelope ./services/e2b-worker/internal/interpreter \
	./services/docker-worker ./services/docker-worker/internal/egress ./services/mcp ./internal/agent/proto

fuzz:
	@for p in $(FUZZPKGS); do \
		for f in $$($(GO) test -list 'Fuzz.*' $$p | grep ^Fuzz); do \
			echo "== $$p $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$p || exit 1; done; done

schemas:
	$(GO) test ./internal/schemas/ -run TestSchemas -update

clean:
	rm -rf bin .data

deploy-smoke:
	bash deploy/compose-smoke.sh

# The fault harness (test/failover): the real binary in split mode and in
# dev, NATS leaders, workers, routers and dev killed under load; each
# scenario bounded and printing its figures. The cheapest scenario also runs
# in `make test`.
failover:
	SBX_FAILOVER=1 $(GO) test -count=1 -v -timeout 30m ./test/failover/
