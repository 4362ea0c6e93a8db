# skewgate — every target works from a clean clone.
GO        ?= go
WASM      := build/skewgate.wasm
BIN       := bin/skewgate
BIN_XDS   := bin/skewgate-xds
# A count, not a duration: Go 1.26's fuzz coordinator can report a spurious
# "context deadline exceeded" when a -fuzztime duration ends mid-input
# (golang/go#75804, fixed in Go 1.27).
FUZZTIME  ?= 3000x
# The commit the tree is at, "-dirty" if it holds changes: the image's label.
REVISION   = $(shell git rev-parse HEAD)$(shell git status --porcelain | grep -q . && echo -dirty)
# Packages that start real kube-apiservers run one at a time: two control
# planes at once overload a 2-core machine.
CLUSTER_PKGS := ./host/testcluster/... ./host/e2e/...
# The binaries the real-cluster tests start, built from the Go module proxy into
# the user cache on first use (see host/testcluster); the commands of one
# Kubernetes release are built by one go build. The real nodes (host/testcluster/
# kubenode) run containerd, crictl and every node command of v1.36.3 and v1.35.4;
# the field-level skew scenarios run kube-apiserver v1.30.14 and v1.31.4.
TEST_BINARIES := etcd@v3.6.16,kube-apiserver@v1.30.14,kube-apiserver@v1.31.4,\
	kube-apiserver@v1.35.4,kube-controller-manager@v1.35.4,kube-scheduler@v1.35.4,kubelet@v1.35.4,kubeadm@v1.35.4,kubectl@v1.35.4,\
	kube-apiserver@v1.36.3,kube-controller-manager@v1.36.3,kube-scheduler@v1.36.3,kubelet@v1.36.3,kubeadm@v1.36.3,kubectl@v1.36.3,\
	containerd@v2.2.9,containerd-shim-runc-v2@v2.2.9,ctr@v2.2.9,crictl@v1.37.0
# The upgrade rehearsals (host/rehearsal) also run every node command of v1.30.14
# and v1.31.4: a list of their own, so that the test binaries do not build two
# more node sets (about 40 minutes cold on 2 cores).
REHEARSAL_BINARIES := $(TEST_BINARIES),\
	kube-controller-manager@v1.30.14,kube-scheduler@v1.30.14,kubelet@v1.30.14,kubeadm@v1.30.14,kubectl@v1.30.14,\
	kube-controller-manager@v1.31.4,kube-scheduler@v1.31.4,kubelet@v1.31.4,kubeadm@v1.31.4,kubectl@v1.31.4
# Each fuzz target runs briefly in `make test`; `make fuzz FUZZTIME=1000000x` runs them longer.
FUZZ_TARGETS := \
	./discovery:FuzzParseRequestInfo \
	./discovery:FuzzFieldSelectorRouting \
	./discovery:FuzzNegotiateDiscovery \
	./discovery:FuzzParseGroupList \
	./discovery:FuzzParseSnapshot \
	./discovery:FuzzJSONValue \
	./discovery:FuzzSplitRequestTarget \
	./discovery:FuzzBodyWalkAgreesWithDecodingTheBody \
	./plugin:FuzzIdentityFromSubject \
	./host/internal/gateway:FuzzSubjectRFC2253 \
	./host/internal/gateway:FuzzAssertedIdentity \
	./host/internal/gateway:FuzzHostileHTTP1MarksNoServer \
	./host/internal/gateway:FuzzHostileHTTP2MarksNoServer \
	./host/internal/wasmhost:FuzzDecodePairs \
	./host/internal/wasmhost:FuzzGuestPointerReads

.PHONY: all build image demo test test-unit unit cluster-test rehearsal-test rehearsal rehearsal-binaries test-binaries fuzz bench bench-check check deadcode fixtures oci clean FORCE

all: build

build: $(WASM) $(BIN) $(BIN_XDS)

# The plugin is a Go wasip1 reactor: upstream Go, c-shared build mode, package
# plugin registered by its command. -s -w drops only the name section (runtime
# tracebacks use pclntab), keeping the module inside its 4 MiB budget;
# plugin/plugintest.BuildModule builds the same for the tests.
$(WASM): FORCE
	@mkdir -p build
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -ldflags="-s -w" -o $(WASM) ./plugin/cmd/skewgate-plugin

# The gateway runs beside every API server in node-local mode, so it links no
# gRPC: the xDS management server is skewgate-xds's. -s -w drops the symbol
# table and DWARF, not pclntab, which panics, tracebacks and profiles read.
# Static (CGO_ENABLED=0): the image has no C library. host/cmd/skewgate's size
# test builds with the same flags.
$(BIN): FORCE
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN) ./host/cmd/skewgate

# grpcnotrace leaves out golang.org/x/net/trace, whose html/template makes the
# linker keep every exported method of every type (9 MB); skewgate-xds never
# serves its pages.
$(BIN_XDS): FORCE
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -tags grpcnotrace -ldflags="-s -w" -o $(BIN_XDS) ./host/cmd/skewgate-xds

# The embedded default: three fake API servers of two versions serving the
# captured discovery documents, skewgate and a plain proxy in front, a scripted
# client and a comparison table; runs until interrupted. A command of its own,
# so that the fakes stay out of bin/skewgate.
demo: build
	$(GO) build -trimpath -o bin/skewgate-demo ./host/cmd/skewgate-demo
	bin/skewgate-demo

# The real clusters of cluster-test leave a 2-core machine idle much of the time:
# fuzzing and, on a cold cache, building the rehearsals' binaries run beside them
# in a session of their own at the lowest CPU priority (nice, and the session's
# autogroup where the kernel groups by session), so that they take only what the
# clusters leave. Their output follows the cluster tests'.
test: build unit test-binaries
	@mkdir -p build
	@setsid nice -n 19 sh -c 'echo 19 > /proc/self/autogroup 2>/dev/null; exec $(MAKE) --no-print-directory fuzz rehearsal-binaries' \
		> build/beside-clusters.log 2>&1 & beside=$$!; \
	trap 'kill -- -'$$beside' 2>/dev/null' INT TERM; \
	$(MAKE) --no-print-directory cluster-test; clusters=$$?; \
	wait $$beside; beside_status=$$?; \
	echo "fuzzing and the rehearsals' binaries, beside the cluster tests:"; cat build/beside-clusters.log; \
	test $$clusters -eq 0 && test $$beside_status -eq 0
	$(MAKE) --no-print-directory rehearsal-test

# Day-to-day work: what `make test` runs but the real clusters and fuzzing. The
# rehearsal package's own unit tests run here; its upgrades run in rehearsal-test.
test-unit: build unit

unit:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e /host/e2e -e /host/testcluster -e /host/rehearsal)
	$(GO) test -count=1 -skip '^TestBaseline|^TestUpgrade' ./host/rehearsal/

test-binaries:
	$(GO) run ./host/testcluster/cmd/kubebin -only "$(TEST_BINARIES)"

# The timeout bounds one package's whole run: host/e2e's scenarios on real kubeadm nodes
# take minutes each on a busy 2-core machine.
cluster-test: test-binaries
	$(GO) test -count=1 -p 1 -timeout 60m $(CLUSTER_PKGS)

# Real kubeadm HA upgrades, node by node, each behind a per-request round-robin
# proxy and through skewgate at once: three real nodes per run, about 10 and 14 minutes
# a pair on 2 cores. Verbose, so that every run's counts are in the log.
rehearsal-test: build rehearsal-binaries
	$(GO) test -count=1 -p 1 -v -timeout 60m -run '^TestUpgrade' ./host/rehearsal/

# Every rehearsal: also 1.30 -> 1.31 behind a TCP load balancer and 1.35 -> 1.36
# with the controllers pointed at the round-robin endpoint, two more baselines
# (about 25 minutes more, so not in `make test`).
rehearsal: build rehearsal-binaries
	$(GO) test -count=1 -p 1 -v -timeout 180m ./host/rehearsal/

rehearsal-binaries:
	$(GO) run ./host/testcluster/cmd/kubebin -only "$(REHEARSAL_BINARIES)"

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

# Micro and macro benchmarks side by side (real kube-apiservers, skewgate, a
# plain reverse proxy, upstream's in-server proxy); writes bench/results/.
# BENCH_FLAGS passes options to skewbench run, e.g. -profile-dir=build/profiles.
bench: build test-binaries
	$(GO) build -trimpath -o bin/loadgen ./bench/cmd/loadgen
	$(GO) build -trimpath -o bin/skewbench ./bench/cmd/skewbench
	bin/skewbench run $(BENCH_FLAGS)

# Compares the newest results with the budgets; PASS/FAIL per line.
bench-check:
	$(GO) run ./bench/cmd/skewbench check

# Re-captures fixtures/ from real kube-apiservers of every pinned version.
fixtures:
	$(GO) run ./host/testcluster/cmd/kubebin
	$(GO) run ./host/testcluster/cmd/capture-fixtures

check: deadcode
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) mod tidy -diff
	@test -z "$$(git status --porcelain)" || { git status --porcelain; echo "tree is dirty"; exit 1; }

# Production functions that neither shipped binary reaches, so that nothing
# only a test calls hides in a production package: deadcode (RTA from main)
# over bin/skewgate with the commands shipped beside it, and over the plugin
# module, whose //go:wasmexport functions are roots deadcode does not know. Only packages bin/skewgate, bin/skewgate-xds or the module link count, and a function
# of a package both link (discovery, plugin/config) is dead only if neither
# reaches it.
DEADCODE     := build/deadcode/deadcode -test=false
DEADCODE_FMT := -f '{{range .Funcs}}{{$$.Path}} {{.Name}} {{.Position}}{{"\n"}}{{end}}'
HOST_MAINS   := ./host/cmd/skewgate ./host/cmd/skewgate-xds ./host/cmd/skewgate-demo ./host/cmd/wasmoci ./host/cmd/serverimage
PLUGIN_MAIN  := ./plugin/cmd/skewgate-plugin

deadcode:
	@mkdir -p build/deadcode
	@GOBIN=$(abspath build/deadcode) $(GO) install golang.org/x/tools/cmd/deadcode@v0.52.0
	@$(DEADCODE) -tags grpcnotrace $(DEADCODE_FMT) $(HOST_MAINS) > build/deadcode/host
	@git grep -n -A1 '^//go:wasmexport' -- '*.go' | sed -n "s|^\(.*\)/[^/]*\.go-[0-9]*-func \([A-Za-z0-9_]*\).*|$$($(GO) list -m)/\1 \2|p" > build/deadcode/wasmexports
	@GOOS=wasip1 GOARCH=wasm $(DEADCODE) $(DEADCODE_FMT) $(PLUGIN_MAIN) | \
		awk 'NR == FNR { root[$$1 " " $$2] = 1; next } !(($$1 " " $$2) in root)' build/deadcode/wasmexports - > build/deadcode/plugin
	@$(GO) list -deps -tags grpcnotrace -f '{{.ImportPath}}' ./host/cmd/skewgate ./host/cmd/skewgate-xds > build/deadcode/host.deps
	@GOOS=wasip1 GOARCH=wasm $(GO) list -deps -f '{{.ImportPath}}' $(PLUGIN_MAIN) > build/deadcode/plugin.deps
	@awk 'FILENAME == ARGV[1] { host[$$1] = 1; next } FILENAME == ARGV[2] { plugin[$$1] = 1; next } \
		FILENAME == ARGV[3] { h[$$1 " " $$2] = $$3; next } { p[$$1 " " $$2] = $$3 } \
		END { \
			for (k in h) { split(k, f, " "); if ((f[1] in host) && (!(f[1] in plugin) || (k in p))) dead[k] = h[k] } \
			for (k in p) { split(k, f, " "); if (!(f[1] in host)) dead[k] = p[k] } \
			for (k in dead) { split(k, f, " "); print dead[k] ": unreachable func: " f[2]; n++ } \
			if (n) { print n " production functions no shipped binary reaches: delete them or move them into tests"; exit 1 } \
		}' build/deadcode/host.deps build/deadcode/plugin.deps build/deadcode/host build/deadcode/plugin

# Packs the freshly built module as a Wasm OCI image (the layout Istio's
# WasmPlugin and Envoy Gateway's EnvoyExtensionPolicy read) into build/oci/,
# prints its digest and pins it in their manifests in plugin/envoy/; the image
# is a function of the module's bytes. OCI_REF=HOST:PORT/REPO:TAG also pushes it.
oci: $(WASM)
	$(GO) run ./host/cmd/wasmoci --wasm $(WASM) --layout build/oci \
		--manifest plugin/envoy/istio-wasmplugin.yaml \
		--manifest plugin/envoy/envoy-gateway-extensionpolicy.yaml \
		$(if $(OCI_REF),--push $(OCI_REF))

# Packs bin/skewgate and the plugin as skewgate's container image (no shell, a
# non-root default user, the source revision as org.opencontainers.image.revision),
# writes it as an OCI image layout (build/image/) and a tar of it
# (build/skewgate-image.tar), prints its digest and, for a binary built from a
# commit, pins it in the kubeadm manifest with that revision. The image is a
# function of the two files: the same commit and Go release give the same digest.
# IMAGE_REF=HOST:PORT/REPO:TAG also pushes it. skewgate-xds gets an image of
# its own the same way (build/image-xds/, build/skewgate-xds-image.tar;
# XDS_IMAGE_REF pushes it).
image: build
	$(GO) build -trimpath -o build/serverimage ./host/cmd/serverimage
	build/serverimage --binary $(BIN) --wasm $(WASM) --revision $(REVISION) \
		--layout build/image --archive build/skewgate-image.tar \
		--manifest host/deploy/kubeadm/skewgate.yaml \
		$(if $(IMAGE_REF),--push $(IMAGE_REF))
	build/serverimage --xds-binary $(BIN_XDS) --revision $(REVISION) \
		--layout build/image-xds --archive build/skewgate-xds-image.tar \
		$(if $(XDS_IMAGE_REF),--push $(XDS_IMAGE_REF))

clean:
	rm -rf build bin

FORCE:
