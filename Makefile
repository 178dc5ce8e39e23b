# cws — Coding Workspace Service. `make` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

MODULE  := github.com/cwsdev/cws
VERSION := $(shell sed -n 's/^const Version = "\(.*\)"$$/\1/p' version/version.go)
COMMIT  := $(shell git rev-parse --verify -q --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X $(MODULE)/version.Commit=$(COMMIT)
GOBUILD := CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)"
# The native launcher (sandbox/agent/launcher) is C, linked static: make deps installs gcc.
CC ?= cc

# Fuzz targets run by `make test`, as package:FuzzName[:fuzztime] (FUZZTIME when
# omitted). A target whose function does not exist yet is skipped with a message.
FUZZ_TARGETS ?= ./workspace/policy:FuzzNormalize ./sandbox/agent/guard:FuzzMatch ./sandbox/agent:FuzzArchiveRoundTrip:30x ./snapshot:FuzzPackRoundTrip:20x
FUZZTIME     ?= 200000x
TEST_TIMEOUT ?= 45m

# Real-dependency tests skip locally when Docker/Redis are absent and fail when CI=true.
export CI
export VERSION

.PHONY: help deps build images run test fuzz bench clean lint kube kube-down kube-images s3

help: ## list the targets
	@echo "cws $(VERSION) ($(COMMIT)) — make <target>:"
	@awk 'BEGIN { FS = ":.*## " } /^[a-z][a-z-]*:.*## / { printf "  %-12s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

deps: ## install docker.io, redis-server, debootstrap, git, gcc + libc6-dev and start dockerd (scripts/deps.sh)
	@scripts/deps.sh

build: ## build bin/cws, bin/cws-agent and bin/cws-launch (static, trimmed)
	@mkdir -p bin
	$(GOBUILD) -o bin/cws ./cmd/cws
	$(GOBUILD) -o bin/cws-agent ./cmd/cws-agent
	$(CC) -static -O2 -s -Wall -o bin/cws-launch sandbox/agent/launcher/cws-launch.c

images: deps ## build cws-workspace:<version> and cws-testbox:<version> (scripts/images.sh)
	@scripts/images.sh

run: deps build images ## start cws serve --dev (prints a dev token and the MCP URL)
	exec bin/cws serve --dev

# Tests are built as cws is (CGO_ENABLED=0: static, and the agent's all-threads
# identity switch needs Go's own syscalls). The Kubernetes leg of the tests runs on the local cluster `make kube` starts, never on
# the cluster of an ambient KUBECONFIG.
KUBE_CACHE      ?= $(or $(CWS_KUBE_CACHE),$(HOME)/.cache/cws-kube)
TEST_KUBECONFIG := $(KUBE_CACHE)/kubeconfig

s3: ## build the S3 server the snapshot store's tests use (SeaweedFS weed, cached; scripts/s3.sh)
	@scripts/s3.sh build >/dev/null

test: deps images kube-images s3 ## go test ./... (real Docker, Redis, Kubernetes and S3), the e2e suite again on the kubernetes driver, then short fuzz runs
	KUBECONFIG=$(TEST_KUBECONFIG) CGO_ENABLED=0 go test ./... -count=1 -timeout $(TEST_TIMEOUT)
	KUBECONFIG=$(TEST_KUBECONFIG) CGO_ENABLED=0 CWS_E2E_DRIVER=kubernetes go test ./e2e -count=1 -timeout $(TEST_TIMEOUT)
	@$(MAKE) --no-print-directory fuzz

kube-images: kube build ## the images the local cluster's pods run: cws (it delivers the agent), cws-workspace, cws-testbox
	@scripts/cws-image.sh cws
	@scripts/kube.sh import cws:$(VERSION) cws-workspace:$(VERSION) cws-testbox:$(VERSION)

fuzz: ## run each FUZZ_TARGETS entry for FUZZTIME
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; fn=$${rest%%:*}; ft=$(FUZZTIME); \
		case $$rest in *:*) ft=$${rest#*:};; esac; \
		if ! grep -qs "^func $$fn(" "$$pkg"/*_test.go; then \
			echo "fuzz: skipping $$fn: no func $$fn in $$pkg"; continue; \
		fi; \
		echo "fuzz: $$pkg $$fn for $$ft"; \
		CGO_ENABLED=0 go test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $$ft "$$pkg"; \
	done

bench: deps images build kube-images s3 ## run the benchmarks and print tables (cmd/cws-bench; the kube sections on the local cluster, the archive sections on a SeaweedFS of their own)
	KUBECONFIG=$(TEST_KUBECONFIG) go run ./cmd/cws-bench

kube: ## start a local Kubernetes cluster built from source (scripts/kube.sh), import cws's images when built; prints KUBECONFIG=...
	@scripts/kube.sh up | sed '$$d'
	@for img in cws:$(VERSION) cws-workspace:$(VERSION) cws-testbox:$(VERSION); do \
		if docker image inspect $$img >/dev/null 2>&1; then scripts/kube.sh import $$img; \
		else echo "kube: $$img is not built yet (make images; scripts/cws-image.sh cws): not imported"; fi; \
	done
	@scripts/kube.sh env

kube-down: ## stop the local Kubernetes cluster and remove its state (scripts/kube.sh down)
	@scripts/kube.sh down

clean: ## remove bin/
	rm -rf bin

lint: ## gofmt -l and go vet ./...
	@files=$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*')); \
	if [ -n "$$files" ]; then echo "gofmt: these files need formatting:"; echo "$$files"; exit 1; fi
	go vet ./...
