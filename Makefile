# swh: ServiceWithHealthchecks. `make run` starts the local sandbox,
# `make test` runs every test; both build what they need first.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT := $(CURDIR)
BIN := $(ROOT)/bin
# Every module and the library modules, in dependency order, from versions.yaml.
MODULES := $(shell $(ROOT)/hack/modules.sh list)
LIB_MODULES := $(shell $(ROOT)/hack/modules.sh list libraries)
CONTROLLER_GEN := $(BIN)/controller-gen
# The Helm chart; deploy/manifests/ holds its rendering for kubectl apply.
CHART := deploy/charts/swh
# Image names of `make images`; the chart's defaults.
IMAGE_REPO ?= ghcr.io/swh-dev
VERSION ?= $(shell awk '/^appVersion:/ {gsub(/"/, "", $$2); print $$2}' $(CHART)/Chart.yaml)

export GOTOOLCHAIN := local

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*?##/ {printf "  %-12s %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

##@ Development

.PHONY: tools
tools: ## Build kube-apiserver, etcd and controller-gen from source into bin/ (cached).
	@hack/build-tools.sh kube-apiserver etcd controller-gen

.PHONY: generate
generate: ## Regenerate deepcopy code, the CRD, the RBAC rules, and the chart's copies and plain manifests.
	@hack/build-tools.sh controller-gen helm
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=api/crd/bases
	cd hack/tools && GOWORK=off go run ./cmd/crd-docs -crd ../../api/crd/bases -o ../../docs/api-reference.md
	$(CONTROLLER_GEN) rbac:roleName=swh-controller paths=./controller/... output:rbac:artifacts:config=$(CHART)/files/rbac/controller
	$(CONTROLLER_GEN) rbac:roleName=swh-agent paths=./agent/... output:rbac:artifacts:config=$(CHART)/files/rbac/agent
	@rm -f $(CHART)/crds/*.yaml && cp api/crd/bases/*.yaml $(CHART)/crds/
	@hack/render-manifests.sh

.PHONY: fmt
fmt: ## gofmt every Go file.
	@git ls-files -z '*.go' | xargs -0 gofmt -w

.PHONY: tidy
tidy: ## go mod tidy in every module.
	@for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy); done

.PHONY: verify
verify: ## Fail on stale generated code, gofmt, vet, tidy, version skew, import rules, library builds.
	@hack/verify.sh

.PHONY: release-plan
release-plan: ## Dry run of releasing VERSION=vX.Y.Z (given; SET=libraries): the tags and go.mod bumps it would make.
	@hack/release-plan.sh "$(if $(filter file,$(origin VERSION)),,$(VERSION))" $(SET)

.PHONY: build
build: ## Build the binaries into bin/, stamped with VERSION (--version, the probes' User-Agent).
	@mkdir -p $(BIN)
	@for m in controller agent; do \
	  if [ -d $$m/cmd ]; then (cd $$m && go build -ldflags "-X github.com/swh-dev/swh/$$m/internal/version.version=v$(VERSION:v%=%)" -o $(BIN)/ ./cmd/...); fi; \
	done

# Without a Docker engine or a registry: OCI image tarballs under _out/images
# (test/images), reproducible; the Dockerfile stays for those with Docker.
.PHONY: images
images: ## Build the controller, agent, test workload and pause images as OCI tarballs in _out/images; print their digests.
	@mkdir -p $(BIN)
	@cd test && go build -o $(BIN)/swh-images ./cmd/swh-images
	@$(BIN)/swh-images -out _out/images -repo $(IMAGE_REPO) -version $(VERSION)

.PHONY: push
push: ## Push the images (linux/amd64 and arm64) and the chart (OCI) to a registry: make push REPO=registry.example.com/swh (docs/installing.md).
	@hack/push.sh "$(REPO)"

.PHONY: plugin-release
plugin-release: ## Build kubectl-swh's release archives (linux and darwin on amd64 and arm64, windows/amd64) and its krew manifest into _out/plugin.
	@hack/plugin-release.sh _out/plugin

##@ Running

.PHONY: run
run: ## Start the local sandbox: control plane, controller, 3 agents, real backends, a live view (docs/sandbox.md).
	@echo ">> control plane: kube-apiserver, etcd and kube-controller-manager (built from source the first time, about ten minutes)"
	@hack/build-tools.sh kube-apiserver etcd kube-controller-manager
	@echo ">> swh-controller and swh-agent"
	@$(MAKE) --no-print-directory build
	@echo ">> swh-sandbox"
	@cd test && go build -o $(BIN)/swh-sandbox ./cmd/swh-sandbox
	@$(BIN)/swh-sandbox $(SANDBOX_FLAGS)

.PHONY: bench-controller
bench-controller: tools build ## Scale check: 10,000 resources at once (SWH_SCALE_RESOURCES=1000 for a short run), the controller beside a raw client making the same writes: time to settle, writes, memory.
	@cd test && go test -c -o $(BIN)/controller.test ./integration/controller/
	@hack/netns.sh bash -c 'cd test/integration/controller && $(BIN)/controller.test -test.run "^$$" -test.bench BenchmarkControllerScale -test.benchtime 1x'


.PHONY: bench-agent
bench-agent: tools build ## Agent reaction time, slice writes per change, footprint and CPU per probe at 1,000 pods, with real backends.
	@cd test && go test -c -o $(BIN)/agent.test ./integration/agent/
	@hack/netns.sh bash -c 'cd test/integration/agent && $(BIN)/agent.test -test.run "^$$" -test.bench BenchmarkAgent -test.benchtime 1x'

.PHONY: test
test: ## Run every test: unit tests, then the integration suites in a private network namespace.
	@hack/test.sh

# The fast loop: unit tests only (no control plane, no namespace), then one
# integration suite at a time, e.g. make integration SUITES=./integration/controller/ RUN=TestAdopt.
SUITES ?= $(shell cd test && go list ./... | grep -v -e "/test/e2e$$" -e "/test/release$$" -e "/test/e2e/realnode$$")
RUN ?= .

.PHONY: unit
unit: ## Unit tests of every released module: no control plane, no network namespace (a minute warm).
	@for m in $(shell $(ROOT)/hack/modules.sh list libraries binaries); do (cd $$m && go test -count=1 ./...); done

.PHONY: integration
integration: ## Integration suites (real kube-apiserver, etcd, PostgreSQL) in a private network namespace; SUITES=./integration/controller/ RUN=TestX to narrow.
	@hack/build-tools.sh kube-apiserver etcd controller-gen helm kube-controller-manager promtool
	@cd test && go mod download # the namespace has no registry
	@hack/netns.sh env GOFLAGS=-mod=readonly bash -c 'cd test && go test -count=1 -timeout 30m -run "$(RUN)" $(SUITES)'

.PHONY: test-fresh
test-fresh: ## Run `make test` as a fresh machine would: a clean clone of HEAD, empty Go caches, no bin/; prints each step's time.
	@hack/fresh-check.sh make test

# Each proxy mode gets a fresh run of its own private namespace (hack/netns.sh):
# the world with the bridge and control plane, node, pod and client
# namespaces inside it. Nothing runs in the host's network namespace.
E2E_MODES ?= nftables iptables

.PHONY: e2e
e2e: build ## End-to-end suite: upstream kube-proxy (nftables, then iptables) carries real requests to real backends.
	@hack/build-tools.sh kube-apiserver etcd kube-proxy kube-controller-manager
	@cd test && go test -c -o $(BIN)/e2e.test ./e2e/
	@hack/e2e.sh $(BIN)/e2e.test $(E2E_MODES) -- $(E2E_FLAGS)

# Real kubelets, containerd and runc run the chart with the images of
# make images (docs/real-nodes.md); everything inside hack/netns.sh.
# REALNODE_SOAK runs the soak (TestSoak) that long inside the suite, in its
# file order among the other scenarios (SOAK_SEED replays its draws there).
REALNODE_SOAK ?=
.PHONY: realnode
realnode: images ## Real-node suite: the release pushed to a registry, the chart installed from it on real kubelet nodes under traffic (install, upgrade, failover, rollout, node failure); REALNODE_SOAK=4m adds a short soak.
	@hack/build-tools.sh kube-apiserver etcd kube-proxy kube-controller-manager kube-scheduler kubelet helm registry
	@cd test && go test -c -o $(BIN)/realnode.test ./e2e/realnode/
	@hack/netns.sh env SWH_IMAGES=$(ROOT)/_out/images SOAK_DURATION=$(REALNODE_SOAK) SOAK_SEED=$(SOAK_SEED) bash -c 'cd test/e2e/realnode && exec "$$0" -test.v -test.count=1 -test.timeout=45m $(REALNODE_FLAGS)' $(BIN)/realnode.test

SOAK_DURATION ?= 30m
SOAK_SEED ?=
.PHONY: soak
soak: images ## Soak on the real-node cluster: faults at random (SOAK_SEED replays a run), invariants checked all the time, for SOAK_DURATION (30m).
	@hack/build-tools.sh kube-apiserver etcd kube-proxy kube-controller-manager kube-scheduler kubelet helm registry
	@cd test && go test -c -o $(BIN)/realnode.test ./e2e/realnode/
	@hack/netns.sh env SWH_IMAGES=$(ROOT)/_out/images SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) bash -c 'cd test/e2e/realnode && exec "$$0" -test.v -test.count=1 -test.run "^TestSoak$$" -test.timeout=4h' $(BIN)/realnode.test

# The same cluster: a plain Service fed by kubelet's readiness probe and a
# resource with the same check, side by side on the same failures.
.PHONY: bench-datapath
bench-datapath: images ## Built-in readiness vs ours on real kubelets: failure → kube-proxy stops sending, and their ratio.
	@hack/build-tools.sh kube-apiserver etcd kube-proxy kube-controller-manager kube-scheduler kubelet helm registry
	@cd test && go test -c -o $(BIN)/realnode.test ./e2e/realnode/
	@hack/netns.sh env SWH_IMAGES=$(ROOT)/_out/images bash -c 'cd test/e2e/realnode && exec "$$0" -test.run "^$$" -test.bench BenchmarkFailureReaction -test.benchtime 20x -test.timeout=30m' $(BIN)/realnode.test

# The run happens in a private network namespace (hack/netns.sh): its load on
# 127.0.0.1, and the TIME_WAIT sockets it counts, are its own.
.PHONY: bench-probes
bench-probes: ## Probers and scheduler side by side with kubelet's and raw baselines.
	@mkdir -p $(BIN)
	@cd test/peers && go build -o $(BIN)/swh-bench-probes .
	@hack/netns.sh $(BIN)/swh-bench-probes

# A simulation, no API server: the slices each layout would write, measured
# as the API server stores and sends them (docs/scaling.md). About 3 minutes
# on 2 cores; SLICESIM_FLAGS=-slicesim.nodes=500 for a short run.
.PHONY: bench-slices
bench-slices: ## Slice layouts, ours vs the built-in controller's, at 500-5,000 nodes: objects, bytes, writes per change.
	@mkdir -p $(BIN)
	@cd test && go test -c -o $(BIN)/slicesim.test ./simulation/slicesim/
	@hack/netns.sh bash -c 'cd test/simulation/slicesim && $(BIN)/slicesim.test -test.run "^$$" -test.bench BenchmarkSliceLayouts -test.benchtime 1x -test.timeout 20m $(SLICESIM_FLAGS)'
