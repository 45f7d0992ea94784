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
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$$(. hack/lib.sh && porter_ldflags)" -o bin/ ./cmd/...

.PHONY: demo
demo: ## from nothing to real builds on the local cluster with MinIO; leaves the ATC running
	hack/demo.sh up

.PHONY: demo-down
demo-down: ## stop the demo's ATC runtime and the local cluster
	hack/demo.sh down

.PHONY: generate
generate: web ## regenerate the protobuf code from the .proto files and the web UI's bundle
	hack/generate.sh

.PHONY: web
web: ## test the web UI's pure logic (node --test web/test) and rebuild its committed bundle (pkg/atc/webui/dist) from web/ with npm ci + esbuild
	hack/web.sh

.PHONY: tools
tools: ## build the pinned third-party binaries from the module proxy: the cluster's (Kubernetes incl. kube-proxy, etcd, containerd, MinIO, registry, CoreDNS) and the tests' (Vault, Dex)
	hack/build-tools.sh test

.PHONY: cluster-up
cluster-up: ## start the local Kubernetes cluster (kube-proxy, CoreDNS) + MinIO + registry (no-op health check when it is up)
	hack/cluster-up.sh

.PHONY: cluster-down
cluster-down: ## stop the local cluster and remove everything it left on the host
	hack/cluster-down.sh

.PHONY: images
images: ## rebuild the porter and atc-porter-runtime images, import them into the cluster, push to its registry
	hack/images.sh project resources

.PHONY: test
test: ## everything CI runs: tools, images, cluster, go test ./..., teardown
	hack/test.sh

.PHONY: docker-up
docker-up: ## start a local Docker engine (for testcontainers) unless one answers
	hack/docker.sh up

.PHONY: docker-down
docker-down: ## stop the Docker engine that docker-up started
	hack/docker.sh down

.PHONY: test-blobstore
test-blobstore: docker-up ## blobstore conformance suite (both drivers) against a MinIO container
	TESTCONTAINERS_RYUK_DISABLED=true $(GO) test ./pkg/blobstore/... ./test/testenv/...

.PHONY: fuzz-extract
fuzz-extract: ## fuzz tar extraction (FUZZTIME=1m)
	$(GO) test ./pkg/blobstore -run '^$$' -fuzz FuzzExtract -fuzztime $(or $(FUZZTIME),1m) -fuzzminimizetime 2s

.PHONY: fuzz-api
fuzz-api: ## fuzz every API route through the real router, fakes behind (FUZZTIME=1m)
	$(GO) test ./pkg/atc/apiserver -run '^$$' -fuzz FuzzAPI -fuzztime $(or $(FUZZTIME),1m) -parallel 2

.PHONY: fuzz-upload
fuzz-upload: ## fuzz the check of `fly execute -i` uploads (FUZZTIME=1m)
	$(GO) test ./pkg/upload -run '^$$' -fuzz FuzzInflate -fuzztime $(or $(FUZZTIME),1m)

.PHONY: bench-artifacts
bench-artifacts: docker-up ## artifact upload/download MB/s table against a MinIO container
	TESTCONTAINERS_RYUK_DISABLED=true $(GO) run ./test/bench/artifacts

.PHONY: bench-sidecar
bench-sidecar: docker-up ## log latency at 10,000 lines/s and sidecar peak RSS moving a 10 GiB artifact
	TESTCONTAINERS_RYUK_DISABLED=true $(GO) run ./test/bench/sidecar

.PHONY: bench-streams
bench-streams: docker-up ## 1,000 simulated sidecars over gRPC+TLS against one server: acked events/s, ack latency, server peak RSS
	TESTCONTAINERS_RYUK_DISABLED=true $(GO) run ./test/bench/streams

.PHONY: bench-buildlog
bench-buildlog: docker-up ## one build printing 10 GiB of output: server peak RSS at 1, 5 and 10 GiB, MB/s
	TESTCONTAINERS_RYUK_DISABLED=true $(GO) run ./test/bench/buildlog

.PHONY: bench-overhead
bench-overhead: cluster-up images ## a `true` task through Porter vs a bare `true` pod and the kubelet's floor (a Porter-shaped pod, no server), median of 20, on the local cluster
	$(GO) run ./test/bench/overhead -n 20

.PHONY: bench-pipelines
bench-pipelines: cluster-up images git-server-image ## pipelines: push to git in a pod → triggered build (polling and webhook), trigger-job -w, a 10-step job vs 10 bare pods, a cached get (median of 5)
	$(GO) run ./test/bench/pipelines -n 5

.PHONY: git-server-image
git-server-image: ## git's http-backend in a pod (porter.local/git-server:dev), imported into the cluster, for bench-pipelines
	hack/images.sh --no-push git-server

.PHONY: bench-scale
bench-scale: cluster-up images ## 100 kwok nodes, 2,000 concurrent steps with simulated sidecars: starts/s, pod → started p50/p99, server RSS, CPU and transactions per step
	$(GO) run ./test/bench/scale

.PHONY: soak
soak: cluster-up images ## a soak under faults on the local cluster (SOAK_DURATION, default 30m; SOAK_FAULTS, default all); table + soak.json
	$(GO) run ./test/soak -faults $(or $(SOAK_FAULTS),all) -json $(or $(SOAK_JSON),soak.json)

.PHONY: bench-ui
bench-ui: cluster-up images ## the web UI in headless chromium: dashboard of 1,000 pipelines, a 200-job pipeline, a 100,000-line build, a 10 GiB build log (seeded) (median of 5)
	$(GO) run ./test/bench/ui

.PHONY: bench-set-pipeline
bench-set-pipeline: cluster-up ## set-pipeline of a 1,000-job pipeline and a 30-deep type chain vs a 1-job one: time, server CPU and peak RSS
	$(GO) run ./test/bench/setpipeline -n 5

.PHONY: bench
bench: bench-artifacts bench-sidecar bench-streams bench-buildlog bench-overhead bench-pipelines bench-set-pipeline bench-scale bench-ui ## every benchmark (prints figures; never fails on timing)
