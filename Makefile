# airlock — see README.md. `make test` and `make bench` install what is missing.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
OUT := $(CURDIR)/_output
BIN := $(OUT)/bin
export AIRLOCK_CACHE ?= /var/cache/airlock
GOTEST_FLAGS ?=
FUZZTIME ?= 3000x

# Agent images (images/NAME, on top of the agent image): `make images`.
AGENT_IMAGES := claude-code codex

.PHONY: all build deps kube generate image images install uninstall deb test test-crun unit vet fuzz integration bench perf perf-load soak fmt clean help

all: build

help: ## list targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build airlock, airlockd, airlockd-kube (airlockd with the Kubernetes node agent), airlock-bench, and the static airlock-init, airlock-logger and airlock-bench-cli (the bench image's client) into _output/bin
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ ./cmd/airlock ./cmd/airlockd ./cmd/airlock-bench
	$(GO) build -trimpath -tags kubernetes -o $(BIN)/airlockd-kube ./cmd/airlockd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ ./cmd/airlock-init ./cmd/airlock-logger
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./bench/clients/cmd/airlock-bench-cli

deps: ## install Debian packages; build containerd and runc at pinned versions
	@bash hack/install-deps.sh $(BIN)

kube: ## build etcd, kube-apiserver and kubelet at pinned versions (the Kubernetes tests' control plane, and the kubelet TestDaemonSetUnderKubelet runs; cached by version, the first build takes 12 to 20 min)
	@bash hack/build-kube.sh $(BIN)

image: deps build ## build the airlock/agent image archive (cached by recipe hash)
	@bash hack/build-image.sh $(OUT) > $(OUT)/agent-image.path
	@echo "agent image: $$(cat $(OUT)/agent-image.path)"

images: image ## also build the agent images' archives (airlock/claude-code, airlock/codex) and the node image's base (deploy/kubernetes/image/Containerfile without its COPY lines; cached by recipe hash)
	@for r in $(AGENT_IMAGES); do \
		bash hack/build-image.sh --recipe $$r $(OUT) > $(OUT)/$$r-image.path || exit 1; \
		echo "$$r image: $$(cat $(OUT)/$$r-image.path)"; \
	done
	@bash hack/build-node-image.sh $(OUT) >/dev/null
	@echo "node image base: $$(cat $(OUT)/node-base-image.path)"

install: deps build images ## install airlock as a service: binaries, the agent images, a systemd unit, /etc/airlock/airlockd.hcl (PREFIX, SYSCONFDIR, STATEDIR, RUNDIR, UNITDIR, DESTDIR; see hack/install.sh)
	@bash hack/install.sh install $(BIN) --image agent=$$(cat $(OUT)/agent-image.path) \
		$(foreach r,$(AGENT_IMAGES),--image $(r)=$$(cat $(OUT)/$(r)-image.path))

deb: deps build images ## build a Debian package of the make install tree (dpkg-deb) into _output/deb
	@bash hack/deb.sh $(BIN) $(OUT)/deb --image agent=$$(cat $(OUT)/agent-image.path) \
		$(foreach r,$(AGENT_IMAGES),--image $(r)=$$(cat $(OUT)/$(r)-image.path))

uninstall: ## remove what make install put in place (not airlockd.hcl unless PURGE=1, nor the state directory)
	@bash hack/install.sh uninstall $(BIN)

# controller-gen (pinned in go.mod as a tool): the DeepCopy methods of kube/apis and of the
# policies types its Session embeds, and the CRDs. crd:allowDangerousTypes lets through
# policies.Resources.CPUs, a float64 (cpus = 1.5), as a JSON number.
CRD_DIR := deploy/kubernetes/crds
generate: ## generate the Kubernetes API's DeepCopy methods (kube/apis, policies) and its CRDs in deploy/kubernetes/crds (controller-gen)
	$(GO) tool controller-gen object paths="{./policies,./kube/apis/...}"
	rm -f $(CRD_DIR)/*.yaml
	$(GO) tool controller-gen crd:allowDangerousTypes=true paths=./kube/apis/... output:crd:artifacts:config=$(CRD_DIR)

vet: ## go vet
	$(GO) vet ./...
	$(GO) vet -tags kubernetes ./cmd/airlockd

unit: ## fast tests, no root needed
	$(GO) test -short -count=1 $(GOTEST_FLAGS) ./...

test: deps kube build images vet ## everything: vet, unit + root integration tests (race), fuzz smoke
	AIRLOCK_BIN_DIR=$(BIN) AIRLOCK_AGENT_IMAGE=$$(cat $(OUT)/agent-image.path) \
		AIRLOCK_CLAUDE_CODE_IMAGE=$$(cat $(OUT)/claude-code-image.path) \
		AIRLOCK_CODEX_IMAGE=$$(cat $(OUT)/codex-image.path) \
		$(GO) test -race -count=1 -timeout 40m $(GOTEST_FLAGS) ./...
	$(GO) test -count=1 -tags kubernetes $(GOTEST_FLAGS) ./cmd/airlockd
	@$(MAKE) --no-print-directory test-crun
	@$(MAKE) --no-print-directory fuzz

test-crun: ## the daemon's and the CLI's integration tests again, sessions on crun (airlockd --runtime crun)
	AIRLOCK_RUNTIME=crun AIRLOCK_BIN_DIR=$(BIN) AIRLOCK_AGENT_IMAGE=$$(cat $(OUT)/agent-image.path) \
		AIRLOCK_CLAUDE_CODE_IMAGE=$$(cat $(OUT)/claude-code-image.path) \
		AIRLOCK_CODEX_IMAGE=$$(cat $(OUT)/codex-image.path) \
		$(GO) test -count=1 -timeout 30m $(GOTEST_FLAGS) ./daemon/... ./e2e/...

fuzz: ## run every fuzz target for FUZZTIME executions
	@bash hack/fuzz.sh $(FUZZTIME)

bench: deps build image ## run the benchmark and print the report
	@bash hack/bench.sh

perf: deps build images ## measure airlock against its baselines: perf/report.md, perf/report.json (PERF_ARGS passes flags)
	@bash hack/perf.sh $(PERF_ARGS)

perf-load: deps build images ## the same measured under load, a busy loop on every core, with a budget of 40 minutes (every section is slower under load): perf/loaded/report.md (PERF_ARGS passes flags)
	@bash hack/perf.sh -load $$(nproc) -budget 40m $(PERF_ARGS)

soak: deps build image ## soak a private airlockd: 2,000 sessions with every layer, 8 at a time, a containerd and an airlockd kill; new sessions for 27 minutes, done within 30; perf/soak.md (SOAK_ARGS passes flags, e.g. -sessions 40)
	$(GO) build -o $(OUT)/perf/ ./perf/cmd/airlock-soak
	$(OUT)/perf/airlock-soak -bin-dir $(BIN) -image $$(cat $(OUT)/agent-image.path) -out perf/soak.md \
		-sessions 2000 -parallel 8 -budget 27m $(SOAK_ARGS)

fmt: ## gofmt the tree
	gofmt -l -w $$(git ls-files '*.go')

clean: ## remove build output
	rm -rf $(OUT)
