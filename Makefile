# skewgate — every target works from a clean clone.
GO        ?= go
WASM      := build/skewgate.wasm
BIN       := bin/skewgate
FUZZTIME  ?= 3s
# Each fuzz target runs briefly in `make test`; `make fuzz FUZZTIME=10m` runs them longer.
FUZZ_TARGETS := \
	./discovery:FuzzParseRequestInfo \
	./discovery:FuzzNegotiateDiscovery \
	./discovery:FuzzParseGroupList \
	./discovery:FuzzParseSnapshot

.PHONY: all build wasm test unit fuzz bench check clean

all: build

build: $(WASM)

# The plugin is a Go wasip1 reactor: upstream Go, c-shared build mode.
$(WASM): FORCE
	@mkdir -p build
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -ldflags="-s -w" -o $(WASM) ./plugin

wasm: $(WASM)

test: build unit fuzz

unit:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 40m ./...

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./discovery/

check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) mod tidy -diff
	@test -z "$$(git status --porcelain)" || { git status --porcelain; echo "tree is dirty"; exit 1; }

clean:
	rm -rf build bin

FORCE:
