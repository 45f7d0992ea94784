# Every entry point of the project. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
GO ?= go
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## build porter and atc-porter-runtime into bin/
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/...

.PHONY: generate
generate: ## regenerate the protobuf code from the .proto files
	hack/generate.sh

.PHONY: tools
tools: ## build the pinned third-party binaries (Kubernetes, etcd, MinIO) from the module proxy
	hack/build-tools.sh
