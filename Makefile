# rdma-cdi Makefile.
#
# Main entry points:
#   make build        every binary of cmd/ (rdma-cdi, rdma-cdi-hook: the container
#                     hooks alone, rdma-cdi-ldsandbox: the hook's ldconfig
#                     sandbox, rdma-cdi-agent: watch, device-plugin and top,
#                     rdma-cdi-dra: the DRA driver) and bin/mkfixture
#   make test         deps + build + images + engines-cdi, then go test ./...
#   make unit         lint, then go test of every package but test/e2e and
#                     test/reliability: no root, engines or Kubernetes needed
#                     (as root, the tests that mount or mknod run too)
#   make lint         gofmt and go vet
#   make vulncheck    govulncheck against a database built from the module proxy
#
# Everything generated goes under bin/ and _out/ (both git-ignored), but the
# engines and the test images, cached per machine under ~/.cache/rdma-cdi
# (ENGINES_DIR, IMAGES_DIR).

SHELL := /bin/bash
.DEFAULT_GOAL := build

GO      ?= go
# The Go that builds, vets, lints and tests is the one go.mod's `toolchain`
# line names (newer than the machines' go1.26.8, whose standard library has
# reachable vulnerabilities: make vulncheck); go fetches it once from the
# module proxy and switches to it under GOTOOLCHAIN=auto, Go's default. These
# machines set local instead (/usr/local/go/go.env, ~/.config/go/env), which
# would keep the installed go1.26.8; the environment beats both, so every go
# run from here (the scripts' included) gets auto, unless the caller set
# GOTOOLCHAIN to something other than local (make GOTOOLCHAIN=local forces it).
ifeq ($(filter-out local,$(GOTOOLCHAIN)),)
export GOTOOLCHAIN := auto
endif
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.0.0-dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# Expanded once: a commit made while make runs must not give the image's
# ref another version than the binaries inside it.
VERSION := $(VERSION)
COMMIT  := $(COMMIT)
LDFLAGS := -s -w -X github.com/rdma-cdi/rdma-cdi/pkg/cli.version=$(VERSION) -X github.com/rdma-cdi/rdma-cdi/pkg/cli.commit=$(COMMIT)

# BINDIR: where build puts the binaries (a test building a package with a
# made-up version uses its own, leaving bin/ alone).
BINDIR      ?= bin
OUT         := _out
# Engines are built once per machine, not per clone: outside the checkout,
# keyed by version, so every clean clone (CI's included) reuses them.
ENGINES_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rdma-cdi/engines
export RDMA_CDI_ENGINES_DIR = $(abspath $(ENGINES_DIR))
# The test images too: each is keyed by the checksum of its inputs.
IMAGES_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rdma-cdi/images
export RDMA_CDI_IMAGES_DIR = $(abspath $(IMAGES_DIR))

# Engines with CDI, built from the Go module proxy (pinned for caching).
CONTAINERD_VERSION ?= v2.4.2
MOBY_VERSION       ?= v2.0.0-beta.24
CRIO_VERSION       ?= v1.34.0
# Kubernetes (kubelet, control plane, kubectl) from the module proxy's source,
# the etcd it ships with and Helm, for the Kubernetes end-to-end tests: the
# newest release in `make test`, the oldest supported one in
# `make test-k8s-oldest`. The e2e helpers default to the same versions.
K8S_VERSION        ?= v1.37.2
K8S_OLDEST_VERSION ?= v1.35.4
ETCD_VERSION       ?= v3.7.0
HELM_VERSION       ?= v4.3.1
# Kubeflow's training operator (its PyTorchJob CRD from the same module) and
# CoreDNS, for the two-node PyTorchJob test.
TRAINING_OPERATOR_VERSION ?= v1.9.2
COREDNS_VERSION           ?= v1.14.7
# Whereabouts, the CNI IPAM plugin the same-subnet test delegates pod
# addresses to (with its CRDs), and the CNI plugins' host-local IPAM, which
# pkg/podnetwork/cniipam's tests run.
WHEREABOUTS_VERSION       ?= v0.9.2
CNI_PLUGINS_VERSION       ?= v1.10.0
# Node Feature Discovery's worker and master, which the topology test runs
# on the agent's features.d file.
NFD_VERSION               ?= v0.18.2
export RDMA_CDI_K8S_VERSION  = $(K8S_VERSION)
export RDMA_CDI_ETCD_VERSION = $(ETCD_VERSION)
export RDMA_CDI_HELM_VERSION = $(HELM_VERSION)

TEST_TIMEOUT ?= 60m
TEST_FLAGS   ?=

.PHONY: all build deps images images-torch image engines-cdi k8s test test-k8s-oldest check unit lint demo clean distclean

all: build

# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------

build:
	@mkdir -p $(BINDIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BINDIR)/ ./cmd/...
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BINDIR)/mkfixture ./test/cmd/mkfixture

# ---------------------------------------------------------------------------
# Test dependencies (Debian packages, local images, engines with CDI)
# ---------------------------------------------------------------------------

# Installs the missing Debian packages (apt, as root). Idempotent.
deps:
	bash test/e2e/deps.sh

# Local test images; tars under $(IMAGES_DIR). Rebuilt only when inputs change.
images: deps
	bash test/images/build.sh $(IMAGES_DIR)
	bash test/images/stacks.sh $(IMAGES_DIR)

# Seed 002's job image: Debian 12, python3-torch and our gloo
# all-reduce main.py, tagged registry.baidubce.com/cce-ai-native/swin-transformer-torch:v2.0;
# $(IMAGES_DIR)/seedtorch{,-docker}.tar. About 0.9 GB, so only when asked (the
# tests that need it build it too, through e2e.SeedTorch).
images-torch: deps
	bash test/images/torch.sh $(IMAGES_DIR)

# The node agent's image (deploy/kubernetes/Containerfile), built by podman
# from the static binaries and busybox-static, saved as a docker-archive that
# the Kubernetes tests import into the node's containerd:
#   $(IMAGE_DIR)/rdma-cdi.tar, its reference in $(IMAGE_DIR)/ref and the
#   checksums of what went in in $(IMAGE_DIR)/context.sha256.
IMAGE_DIR ?= $(OUT)/image
IMAGE_REF ?= localhost/rdma-cdi:$(subst +,-,$(VERSION))
image: build
	@rm -rf $(IMAGE_DIR)/context && mkdir -p $(IMAGE_DIR)/context
	cp $(BINDIR)/rdma-cdi $(BINDIR)/rdma-cdi-hook $(BINDIR)/rdma-cdi-ldsandbox $(BINDIR)/rdma-cdi-agent $(BINDIR)/rdma-cdi-dra /bin/busybox $(IMAGE_DIR)/context/
	podman build --quiet -f deploy/kubernetes/Containerfile -t $(IMAGE_REF) $(IMAGE_DIR)/context
	rm -f $(IMAGE_DIR)/rdma-cdi.tar.tmp
	podman save --quiet --format docker-archive -o $(IMAGE_DIR)/rdma-cdi.tar.tmp $(IMAGE_REF)
	mv $(IMAGE_DIR)/rdma-cdi.tar.tmp $(IMAGE_DIR)/rdma-cdi.tar
	echo $(IMAGE_REF) >$(IMAGE_DIR)/ref
	cd $(IMAGE_DIR)/context && sha256sum rdma-cdi rdma-cdi-hook rdma-cdi-ldsandbox rdma-cdi-agent rdma-cdi-dra >../context.sha256

# containerd 2.x (+ ctr, shim), dockerd 29 and CRI-O in $(ENGINES_DIR)/bin, cached by version.
engines-cdi: $(ENGINES_DIR)/containerd-$(CONTAINERD_VERSION).stamp $(ENGINES_DIR)/dockerd-$(MOBY_VERSION).stamp \
	$(ENGINES_DIR)/crio-$(CRIO_VERSION).stamp

$(ENGINES_DIR)/containerd-$(CONTAINERD_VERSION).stamp:
	@mkdir -p $(ENGINES_DIR)/bin
	CGO_ENABLED=0 GOBIN=$(abspath $(ENGINES_DIR)/bin) $(GO) install \
		github.com/containerd/containerd/v2/cmd/containerd@$(CONTAINERD_VERSION) \
		github.com/containerd/containerd/v2/cmd/ctr@$(CONTAINERD_VERSION) \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$(CONTAINERD_VERSION)
	rm -f $(ENGINES_DIR)/containerd-*.stamp && touch $@

# CRI-O (crio + its pinns helper) from the module proxy's source: the proxy
# does not serve `go install` for it (ENGINES.md). cgo, about 2.5 minutes.
$(ENGINES_DIR)/crio-$(CRIO_VERSION).stamp:
	CRIO_VERSION=$(CRIO_VERSION) ENGINES_DIR=$(abspath $(ENGINES_DIR)) bash test/e2e/build-crio.sh
	rm -f $(ENGINES_DIR)/crio-*.stamp && touch $@

$(ENGINES_DIR)/dockerd-$(MOBY_VERSION).stamp:
	@mkdir -p $(ENGINES_DIR)/bin
	CGO_ENABLED=0 GOBIN=$(abspath $(ENGINES_DIR)/bin) $(GO) install \
		github.com/moby/moby/v2/cmd/dockerd@$(MOBY_VERSION)
	rm -f $(ENGINES_DIR)/dockerd-*.stamp && touch $@

# kubelet, kube-apiserver, kube-scheduler, kube-controller-manager and
# kubectl in $(ENGINES_DIR)/k8s-VERSION, etcd in etcd-VERSION and helm in
# helm-VERSION, each cached by version (test/e2e/build-k8s.sh: a cold build
# takes about 15 minutes on 2 cores; etcd and helm 1-3 minutes each).
# K8S_TOOLS are what the tests run beside any Kubernetes release.
K8S_TOOLS = $(ENGINES_DIR)/etcd-$(ETCD_VERSION).stamp $(ENGINES_DIR)/helm-$(HELM_VERSION).stamp \
	$(ENGINES_DIR)/training-operator-$(TRAINING_OPERATOR_VERSION).stamp $(ENGINES_DIR)/coredns-$(COREDNS_VERSION).stamp \
	$(ENGINES_DIR)/whereabouts-$(WHEREABOUTS_VERSION).stamp $(ENGINES_DIR)/cni-plugins-$(CNI_PLUGINS_VERSION).stamp \
	$(ENGINES_DIR)/nfd-$(NFD_VERSION).stamp
k8s: $(ENGINES_DIR)/k8s-$(K8S_VERSION).stamp $(K8S_TOOLS)

$(ENGINES_DIR)/k8s-%.stamp:
	K8S_VERSION=$* ENGINES_DIR=$(abspath $(ENGINES_DIR)) bash test/e2e/build-k8s.sh
	touch $@

$(ENGINES_DIR)/etcd-%.stamp:
	ETCD_VERSION=$* ENGINES_DIR=$(abspath $(ENGINES_DIR)) bash test/e2e/build-etcd.sh
	touch $@

# training-operator-VERSION/: the operator's binary and the PyTorchJob CRD
# of its own module (manifests/base/crds).
$(ENGINES_DIR)/training-operator-%.stamp:
	@mkdir -p $(ENGINES_DIR)/training-operator-$*
	CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN=$(abspath $(ENGINES_DIR))/training-operator-$* $(GO) install \
		github.com/kubeflow/training-operator/cmd/training-operator.v1@$*
	cp "$$(GOFLAGS=-mod=mod $(GO) mod download -json github.com/kubeflow/training-operator@$* | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" \
		$(ENGINES_DIR)/training-operator-$*/
	touch $@

$(ENGINES_DIR)/whereabouts-%.stamp:
	WHEREABOUTS_VERSION=$* ENGINES_DIR=$(abspath $(ENGINES_DIR)) bash test/e2e/build-whereabouts.sh
	touch $@

$(ENGINES_DIR)/nfd-%.stamp:
	NFD_VERSION=$* ENGINES_DIR=$(abspath $(ENGINES_DIR)) bash test/e2e/build-nfd.sh
	touch $@

# cni-plugins-VERSION/host-local: the reference IPAM plugin.
$(ENGINES_DIR)/cni-plugins-%.stamp:
	@mkdir -p $(ENGINES_DIR)/cni-plugins-$*
	CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN=$(abspath $(ENGINES_DIR))/cni-plugins-$* $(GO) install \
		github.com/containernetworking/plugins/plugins/ipam/host-local@$*
	touch $@

$(ENGINES_DIR)/coredns-%.stamp:
	@mkdir -p $(ENGINES_DIR)/coredns-$*
	CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN=$(abspath $(ENGINES_DIR))/coredns-$* $(GO) install github.com/coredns/coredns@$*
	touch $@

$(ENGINES_DIR)/helm-%.stamp:
	@mkdir -p $(ENGINES_DIR)/helm-$*
	CGO_ENABLED=0 GOBIN=$(abspath $(ENGINES_DIR))/helm-$* $(GO) install helm.sh/helm/v4/cmd/helm@$*
	touch $@

# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

# The e2e tests run real engines as root; in CI (CI=true) a missing engine
# fails the test instead of skipping it.
# Each Kubernetes node of the e2e tests (kubelet, containerd, API server)
# lives until its test binary ends, with a dozen inotify instances: Debian's
# 128 per user runs out ("too many open files"), so the limit is raised.
INOTIFY_INSTANCES ?= 1024
RAISE_INOTIFY = [ "$$(cat /proc/sys/fs/inotify/max_user_instances)" -ge $(INOTIFY_INSTANCES) ] || \
	sysctl -qw fs.inotify.max_user_instances=$(INOTIFY_INSTANCES)
# The run's events go through test/cmd/testreport: the output of failed
# tests, every package's result, and a timing summary at the end (each
# package's time and the TEST_TOP slowest tests); all of it is kept in
# $(OUT)/test.json.
TEST_TOP ?= 10
test: deps lint vulncheck build images image engines-cdi k8s
	$(RAISE_INOTIFY)
	@mkdir -p $(OUT)
	CGO_ENABLED=0 $(GO) build -o $(BINDIR)/testreport ./test/cmd/testreport
	set -o pipefail; $(GO) test -json ./... -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) | tee $(OUT)/test.json | \
		$(BINDIR)/testreport -top $(TEST_TOP)

# The Kubernetes end-to-end tests (device plugin, DRA driver, Helm chart) on
# the oldest supported release, whose beta features are off by default.
K8S_TESTS ?= ^TestKube
test-k8s-oldest: deps build images image engines-cdi $(ENGINES_DIR)/k8s-$(K8S_OLDEST_VERSION).stamp $(K8S_TOOLS)
	$(RAISE_INOTIFY)
	RDMA_CDI_K8S_VERSION=$(K8S_OLDEST_VERSION) $(GO) test ./test/e2e/kube/ ./test/e2e/network/ ./test/e2e/resilience/ -count=1 -timeout $(TEST_TIMEOUT) \
		-run '$(K8S_TESTS)' $(TEST_FLAGS)

# The churn of TestKubeChurn for SOAK_TIME (make test runs 1 minute of it),
# half with each of the agent's Kubernetes modes; figures in its RESULT lines.
SOAK_TIME ?= 30m
SOAK_TIMEOUT ?= 60m
.PHONY: soak
soak: deps build images image engines-cdi k8s
	$(RAISE_INOTIFY)
	RDMA_CDI_SOAK=$(SOAK_TIME) $(GO) test ./test/reliability -run '^TestKubeChurn$$' -count=1 -v -timeout $(SOAK_TIMEOUT)

# make check: the lint (gofmt, vet, golangci-lint), make vulncheck and the
# unit tests, test/arch and the docs checks among them; no
# root, no engine, no Kubernetes, nothing installed (make unit is its old name). Every package but test/e2e and
# test/reliability (which run real
# engines as root); without root, the tests that need it (mknod, mounts,
# namespaces) skip, but for two of pkg/metrics that fail (docs/development.md).
# Go's test cache applies: TEST_FLAGS=-count=1 reruns all.
UNIT_EXCLUDE := /test/(e2e|reliability)(/|$$)
check: lint vulncheck
	@set -o pipefail; pkgs=$$($(GO) list ./... | grep -Ev '$(UNIT_EXCLUDE)') || exit 1; \
	echo "$(GO) test [every package but test/e2e and test/reliability] $(TEST_FLAGS)"; \
	$(GO) test $$pkgs $(TEST_FLAGS)
unit: check

# golangci-lint, built once per machine beside the engines (outside the
# checkout), by version and by the Go toolchain go.mod selects (GO_VERSION),
# which builds it: like govulncheck, it type-checks that toolchain's
# standard library, and one built by an older Go can refuse a newer one's
# sources. (GOTOOLCHAIN passed by hand: make 4.3's $(shell) gets no exports.)
GOLANGCI_LINT_VERSION ?= v2.15.0
TOOLS_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rdma-cdi/tools
GO_VERSION := $(shell GOTOOLCHAIN=$(GOTOOLCHAIN) $(GO) env GOVERSION)
GOLANGCI_LINT := $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)-$(GO_VERSION)/golangci-lint
$(GOLANGCI_LINT):
	GOBIN=$(dir $@) CGO_ENABLED=0 $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

lint: $(GOLANGCI_LINT)
	@files=$$(git ls-files --cached --others --exclude-standard -- '*.go' | while read -r f; do [ -f "$$f" ] && echo "$$f"; done); \
	out=$$(gofmt -l $$files); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

# govulncheck over the whole module in source mode (only a vulnerable symbol
# our code reaches fails it), with a vulnerability database built here from
# the Go module proxy, since vuln.go.dev is out of reach (test/tools/vulncheck.sh
# says how). govulncheck goes into TOOLS_DIR once per version and Go
# toolchain, the database once per vulndb version (about 21 MB). The standard
# library it checks is that of go.mod's toolchain (a standard-library finding
# is fixed by raising that line to a Go that fixes it); part of make check.
# To refresh both pins (docs/development.md):
#   GOFLAGS= go list -m golang.org/x/vuln@latest     -> GOVULNCHECK_VERSION
#   GOFLAGS= go list -m golang.org/x/vulndb@latest   -> VULNDB_VERSION
# then `make vulncheck`, and fix what it reports before committing the pins.
GOVULNCHECK_VERSION ?= v1.9.0
VULNDB_VERSION      ?= v0.0.0-20261105234957-e22db6528018
.PHONY: vulncheck
vulncheck:
	GO=$(GO) GOVULNCHECK_VERSION=$(GOVULNCHECK_VERSION) VULNDB_VERSION=$(VULNDB_VERSION) \
		TOOLS_DIR=$(TOOLS_DIR) bash test/tools/vulncheck.sh $(CURDIR)

# ---------------------------------------------------------------------------
# Demo (owned by the lead engineer)
# ---------------------------------------------------------------------------

# Builds only what the demo runs: the DRA driver's client-go is most of a
# cold build, and the demo never starts it.
demo:
	@mkdir -p $(BINDIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BINDIR)/ ./cmd/rdma-cdi ./cmd/rdma-cdi-hook ./cmd/rdma-cdi-ldsandbox
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BINDIR)/mkfixture ./test/cmd/mkfixture
	./test/demo.sh

# ---------------------------------------------------------------------------
# Housekeeping
# ---------------------------------------------------------------------------

# Removes build outputs but keeps the cached images and engines.
clean:
	rm -rf bin/

# Removes everything generated, caches included.
distclean: clean
	rm -rf $(OUT)

# ---------------------------------------------------------------------------
# Reliability (see RELIABILITY.md)
# ---------------------------------------------------------------------------

FUZZTIME ?= 30s
STRESS_TIMEOUT ?= 120m

# pkg:FuzzTarget pairs that `make fuzz` runs, each for FUZZTIME.
FUZZ_TARGETS := \
	./pkg/sysfs:FuzzParseGID ./pkg/sysfs:FuzzParseGIDType ./pkg/sysfs:FuzzParseNumbered ./pkg/sysfs:FuzzParseDevNumbers \
	./pkg/hooks:FuzzReadState ./pkg/hooks:FuzzLoadSpec \
	./pkg/ociedit:FuzzParseRequest ./pkg/ociedit:FuzzParseRequestConfig \
	./pkg/nccl:FuzzMergeConf ./pkg/config:FuzzDecode \
	./pkg/hostlibs/ldcache:FuzzParse

.PHONY: fuzz stress

# Each target for FUZZTIME; a crash is written under the package's
# testdata/fuzz/ and fails the run (check it in as a regression test).
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s; \
	done

# The long load run: 500 sequential and 50x4 concurrent podman starts while
# the spec is rewritten (the quick version runs in `make test`).
stress: deps build images
	RDMA_CDI_STRESS=1 $(GO) test ./test/reliability -run 'TestLoadPodmanWhileSpecRewritten' -count=1 -v -timeout $(STRESS_TIMEOUT)

# ---------------------------------------------------------------------------
# Packaging and install: deb, install, uninstall (owned by the deploy
# engineer; everything lives in deploy/deploy.mk)
# ---------------------------------------------------------------------------

include deploy/deploy.mk

# ---------------------------------------------------------------------------
# Benchmarks (see BENCHMARKS.md). Not part of `test`.
# ---------------------------------------------------------------------------

# Whole-process comparisons, each interleaved in one run (bench/abrun), on
# fixtures and real podman; results into BENCHMARKS.md. As root, after
# `make images`. BENCH_PARTS picks parts: generate hooks podman watch.
BENCH_ROUNDS ?= 21
BENCH_SCALE_ROUNDS ?= 11
BENCH_PARTS  ?=

.PHONY: bench
bench: build
	ROUNDS=$(BENCH_ROUNDS) SCALE_ROUNDS=$(BENCH_SCALE_ROUNDS) bash bench/run.sh $(BENCH_PARTS)
