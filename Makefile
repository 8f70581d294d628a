# sless — run `make dev` to start the platform locally, `make test` to run every test.
SHELL := /bin/bash
GO ?= go
BIN := bin
GOTEST_FLAGS ?= -count=1 -timeout 60m
# Every Go module of the repository (the root plus nested ones such as the provider): the
# tracked go.mod files only, never the builds `make dev` leaves under .sless/.
MODULES := $(shell git ls-files '*go.mod' | grep -v /testdata/ | xargs -n1 dirname | sort)

.PHONY: all build config-image generate image lint test test-deps test-e2e test-faults test-unit verify-generated

all: build

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/sless ./cmd/sless

## image: the platform image (one sless binary: operator, gateway, dispatcher) built by ko
## without Docker, reproducibly (same commit, same digest), for PLATFORMS on the pinned static
## base of .ko.yaml (BASE_IMAGE=ref overrides it). REGISTRY=host/path pushes it as
## host/path/sless and writes the pushed reference with its digest to IMAGE_REF; without
## REGISTRY it is written as an OCI layout to IMAGE_LAYOUT. KO_FLAGS are added (e.g.
## --insecure-registry for a plain-HTTP registry).
REGISTRY ?=
BASE_IMAGE ?=
PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_LAYOUT ?= $(BIN)/image
IMAGE_REF ?= $(BIN)/image.ref
KO_FLAGS ?=
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
image:
	@set -euo pipefail; ko=$$(bash test/tools/ko.sh); mkdir -p $(BIN); \
	export VERSION=$(VERSION) CGO_ENABLED=0; \
	if [ -n "$(BASE_IMAGE)" ]; then export KO_DEFAULTBASEIMAGE=$(BASE_IMAGE); fi; \
	flags="--base-import-paths --sbom=none --platform=$(PLATFORMS) $(KO_FLAGS)"; \
	if [ -n "$(REGISTRY)" ]; then \
	  ref=$$(KO_DOCKER_REPO=$(REGISTRY) $$ko build $$flags --tags=$(VERSION) ./cmd/sless); echo "$$ref" > $(IMAGE_REF); echo "$$ref"; \
	else \
	  rm -rf $(IMAGE_LAYOUT); KO_DOCKER_REPO=sless.local $$ko build $$flags --push=false --oci-layout-path=$(IMAGE_LAYOUT) ./cmd/sless; \
	fi

## config-image: pin config/ (kustomize images:) and the Helm chart's values to the image
## `make image REGISTRY=...` pushed (IMAGE_REF), by digest.
CONFIG ?= config
config-image:
	@set -euo pipefail; ref=$$(cat $(IMAGE_REF)); digest=$${ref##*@}; repo=$${ref%@*}; \
	case "$${repo##*/}" in *:*) repo=$${repo%:*};; esac; \
	case "$$digest" in sha256:*) ;; *) echo "$(IMAGE_REF) holds $$ref, want repo@sha256:..."; exit 1;; esac; \
	sed -i -e "s#^  newName: .*#  newName: $$repo#" -e "s#^  \(newTag\|digest\): .*#  digest: $$digest#" $(CONFIG)/default/kustomization.yaml; \
	sed -i -e "s#^  repository: .*#  repository: $$repo#" -e "s#^  digest: .*#  digest: \"$$digest\"#" $(CONFIG)/helm/sless/values.yaml; \
	echo "$(CONFIG)/ and $(CONFIG)/helm/sless now install $$repo@$$digest"

## generate: regenerate deepcopy code, CRDs and RBAC from the kubebuilder markers (into the
## Helm chart), then render config/default/sless.yaml from the chart: the chart is the one
## install definition, config/default its kustomize form. cmd/sless/deps.txt lists the
## third-party packages of the binary on both image platforms: the Dockerfile compiles them in
## a layer of their own. The provider's reference pages (terraform-provider-sless/docs) are
## tfplugindocs' from its schema and examples/; it reads the schema through the Terraform CLI
## the provider's tests use (TF_ACC_TERRAFORM_PATH, else test/tools/terraform.sh builds it).
generate:
	$(GO) run ./triggers/gen
	$(GO) tool controller-gen object paths=./apis/... crd paths=./apis/... output:crd:artifacts:config=config/crd/bases
	$(GO) tool controller-gen rbac:roleName=sless-operator paths=./reconcilers/... output:rbac:artifacts:config=config/helm/sless/templates
	cp config/crd/bases/*.yaml config/helm/sless/crds/
	$(GO) test ./config -run '^TestHelmChartMatchesConfig$$' -count=1 -args -update
	@set -euo pipefail; deps() { GOOS=linux GOARCH=$$1 CGO_ENABLED=0 $(GO) list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./cmd/sless | grep -v '^sless.dev/' | sort; }; \
	comm -12 <(deps amd64) <(deps arm64) > cmd/sless/deps.txt
	@set -euo pipefail; tf=$${TF_ACC_TERRAFORM_PATH:-$$(test/tools/terraform.sh)}; \
	cd terraform-provider-sless && PATH="$$(dirname "$$tf"):$$PATH" $(GO) tool tfplugindocs generate --provider-name sless

## verify-generated: fail when generated files are not what `make generate` produces.
verify-generated: generate
	@git diff --exit-code -- apis config cmd/sless/deps.txt terraform-provider-sless/docs gateway/api/zz_generated.triggerkinds.go || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }

## lint: gofmt, go vet and staticcheck over every module.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@for m in . terraform-provider-sless; do (cd $$m && $(GO) tool staticcheck ./...) || exit 1; done
	@$(GO) vet -tags e2e ./test/e2e/
	@$(GO) vet -tags faults ./test/faults/

## test-unit: the contributor's loop — `go test -short` over every module: every test that
## needs nothing but Go and the interpreters on this machine (python3, node). No envtest,
## PostgreSQL, RabbitMQ, S3, Terraform, Chromium or tool build: the shared test helpers skip
## the tests that need one under -short (test/testkit NeedsHeavy), and `make test` runs them.
## Go's test cache is kept: a second run re-runs only what a change touched. gofmt first
## (a quarter of a second); go vet and staticcheck stay in `make lint`. -p 4: the slow packages
## (devplane, buildkit, the pool, the CLI) mostly wait on the processes they start, so four at
## once on two cores finish sooner than go test's default of one per core.
GOTEST_UNIT_FLAGS ?= -timeout 10m -p 4
test-unit:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@set -euo pipefail; \
	for m in $(MODULES); do echo "== go test -short $$m"; (cd $$m && $(GO) test -short $(GOTEST_UNIT_FLAGS) ./...) || exit 1; done

## test-deps: start PostgreSQL/RabbitMQ if down, install packages, build the cached tools.
test-deps:
	@bash test/tools/deps.sh

## test: everything — unit, envtest, real PostgreSQL/RabbitMQ/S3, fuzz seed corpora.
test: test-deps lint
	@set -euo pipefail; \
	export KUBEBUILDER_ASSETS=$$(bash test/tools/envtest.sh); \
	export PATH="$$(bash test/tools/node.sh):$$PATH"; \
	for m in $(MODULES); do echo "== go test $$m"; (cd $$m && $(GO) test $(GOTEST_FLAGS) ./...) || exit 1; done

## test-e2e: end to end on the real KEDA operator and HTTP add-on with kube-controller-manager
## and kube-scheduler, in a private network namespace (root), process kubelets (three nodes) the
## only stand-in. The journeys that mostly wait run in parallel after the serial ones
## (test/e2e/doc.go). The fault suite (test-faults) runs beside it, on processes and a broker
## and database of its own; its output follows the journeys'. Builds the cached tools it needs
## on first use (test/tools/keda.sh: tens of minutes cold).
test-e2e: test-deps
	@set -uo pipefail; faults_log=$$(mktemp); \
	$(MAKE) --no-print-directory test-faults > "$$faults_log" 2>&1 & faults=$$!; \
	$(GO) test -tags e2e -count=1 -timeout 45m -parallel 32 -v ./test/e2e/; e2e_rc=$$?; \
	wait $$faults; faults_rc=$$?; echo "== make test-faults: exit $$faults_rc"; cat "$$faults_log"; rm -f "$$faults_log"; \
	[ $$e2e_rc -eq 0 ] && [ $$faults_rc -eq 0 ]

## bench: the figure tests on the e2e ground, outside CI (test/e2e: TestColdStartFigures, the
## cold starts through KEDA step by step; TestBuildFigures, kaniko builds per runtime; and
## TestColdStartSlessDev beside them). SLESS_E2E_COLD_STARTS and SLESS_E2E_BUILDS set the
## counts, SLESS_E2E_FIGURES=file collects the tables; docs/benchmarks.md publishes them.
## The micro-benchmarks are `go test -bench` in their packages and test/bench/*.sh.
.PHONY: bench
bench: test-deps
	SLESS_E2E_BENCH=1 $(GO) test -tags e2e -count=1 -timeout 45m -parallel 32 -v \
		-run '^(TestColdStartFigures|TestBuildFigures|TestColdStartSlessDev)$$' ./test/e2e/

## test-faults: the fault-injection suite (test/faults/, run by test-e2e): kill -9 and restart
## sless dev, the dispatcher and the gateway, stop/start a private RabbitMQ node and PostgreSQL
## cluster, under 5,000 HTTP invocations and 5,000 AMQP messages; prints the table that
## docs/reliability.md publishes. About a minute and a half.
test-faults: test-deps
	$(GO) test -tags faults -count=1 -timeout 15m -v ./test/faults/

## dev: build sless and run the whole platform on this machine (`sless dev`) with the examples
## deployed (hello-go/python/node, http triggers, a cron trigger); prints their URLs and a
## token. Ctrl-C stops everything, function processes included. SLESS_AMQP_URL and
## SLESS_DATABASE_URL turn on event triggers and PostgreSQL history.
.PHONY: dev
dev:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/sless ./cmd/sless
	exec $(BIN)/sless dev --data-dir .sless --deploy-examples examples
