# ember's Go side, included from the root Makefile (`include go.mk`).
#   make go-test    build the release library; go vet and go test the binding (static under -race, then shared) and the
#                   gateway on the real model, their embeddings and reranking on a synthetic bge-small and
#                   bge-small-rerank (ember-cli synthetic); a Go program outside the repository built against
#                   `make install` (tests/go/check_install.sh: the installed module proxy, the library through
#                   pkg-config); then the end-to-end tests with the official OpenAI Python
#                   client (generation, and embeddings), plain HTTP (reranking), and each other API's official
#                   client (tests/e2e/test_gateway_apis.py: Responses, Anthropic Messages, Ollama, llama-server)
#   make gateway    build examples/gateway into $(CARGO_TARGET_DIR or target)/go/ember-gateway
#   make go-bench   gateway throughput at 8 and 32 clients, beside the binding and the same load from Rust
#                   (scripts/bench-gateway.py; a few minutes on 2 cores)
#   make test-scale three gateways behind HAProxy under the official OpenAI client: kill and drain, session
#                   affinity, three replicas against one (tests/scale/run.py; docs/deploy.md)
# Needs Go >= 1.23 (standard library only: no module proxy) and, for the end-to-end tests, `pip install openai
# anthropic ollama` (scripts/install-test-tools.sh).
# The model comes from the root Makefile's `model` target (EMBER_MODEL overrides its path).

CARGO ?= cargo
GO ?= go
PYTHON ?= python3

# Where cargo puts the library (it honours CARGO_TARGET_DIR) and where the gateway goes.
GO_EMBER_TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
GO_EMBER_LIB_DIR := $(GO_EMBER_TARGET_DIR)/release
GO_EMBER_GATEWAY := $(GO_EMBER_TARGET_DIR)/go/ember-gateway
GO_EMBER_GEMMA3 := $(abspath models/gemma-3-270m-q4_k_m.gguf)
# The tests of embeddings write their encoder model with it (ember-cli synthetic, llama.cpp's BERT vocabulary).
GO_EMBER_CLI := $(GO_EMBER_LIB_DIR)/ember-cli

# GOTOOLCHAIN=local: go.mod says `go 1.23`, and without it Go would try to download a toolchain. GOFLAGS'
# ember_in_repo: link this checkout's target/release (bindings/go/link_in_repo_*.go), not an installed library
# through pkg-config (the binding's default, for programs outside the repository: tests/go/check_install.sh). The
# binding's own link flags point at target/release; CGO_LDFLAGS comes first, so a CARGO_TARGET_DIR elsewhere wins
# (the rpath serves the shared-library build).
GO_ENV := GOTOOLCHAIN=local CGO_ENABLED=1 GOFLAGS=-tags=ember_in_repo \
	CGO_LDFLAGS="-L$(GO_EMBER_LIB_DIR) -Wl,-rpath,$(GO_EMBER_LIB_DIR)"
# The shared-library runs name both tags (a -tags on the command line replaces GOFLAGS' one).
GO_SHARED_TAGS := -tags ember_in_repo,ember_shared

# Go's build cache does not hash libember.a, which the default (static) link takes: a rebuilt library could go
# unlinked until the cache is cleared. A link flag naming the archive's hash makes each change relink.
GO_RELINK = -ldflags=-X=main.emberArchive=$(shell sha256sum $(GO_EMBER_LIB_DIR)/libember.a 2>/dev/null | cut -c1-16)

.PHONY: go-lib go-cli go-test gateway go-bench test-scale

# The libraries (c.mk's c-lib: also the SONAME link the shared build loads).
go-lib: c-lib

go-cli:
	$(CARGO) build --release --bin ember-cli

gateway: go-lib
	cd examples/gateway && $(GO_ENV) $(GO) build $(GO_RELINK) -o $(GO_EMBER_GATEWAY) .

go-test: model templates vocabs gateway go-cli
	@gofmt="$$($(GO) env GOROOT)/bin/gofmt"; unformatted="$$($$gofmt -l bindings/go examples/gateway tests/go)"; \
		[ -z "$$unformatted" ] || { echo "gofmt would change: $$unformatted" >&2; exit 1; }
	cd bindings/go && $(GO_ENV) $(GO) vet ./... && $(GO_ENV) $(GO) vet $(GO_SHARED_TAGS) ./...
	cd bindings/go && $(GO_ENV) EMBER_CLI=$(GO_EMBER_CLI) $(GO) test $(GO_RELINK) -race -count=1 ./... && \
		$(GO_ENV) EMBER_CLI=$(GO_EMBER_CLI) $(GO) test -count=1 $(GO_SHARED_TAGS) ./...
	cd examples/gateway && $(GO_ENV) $(GO) vet ./... && $(GO_ENV) EMBER_CLI=$(GO_EMBER_CLI) $(GO) test $(GO_RELINK) -count=1 ./...
	@# A Go program outside the repository, against `make install PREFIX=<scratch>` (pkg-config, the module proxy).
	tests/go/check_install.sh
	EMBER_GATEWAY=$(GO_EMBER_GATEWAY) $(PYTHON) tests/e2e/test_gateway.py
	EMBER_GATEWAY=$(GO_EMBER_GATEWAY) $(PYTHON) tests/e2e/test_gateway_apis.py
	EMBER_GATEWAY=$(GO_EMBER_GATEWAY) EMBER_CLI=$(GO_EMBER_CLI) $(PYTHON) tests/e2e/test_gateway_embeddings.py
	EMBER_GATEWAY=$(GO_EMBER_GATEWAY) EMBER_CLI=$(GO_EMBER_CLI) $(PYTHON) tests/e2e/test_gateway_rerank.py
	@echo "== the binding and the gateway on Gemma 3 270M (the second architecture)"
	cd bindings/go && EMBER_MODEL=$(GO_EMBER_GEMMA3) $(GO_ENV) EMBER_CLI=$(GO_EMBER_CLI) $(GO) test $(GO_RELINK) -count=1 ./...
	EMBER_MODEL=$(GO_EMBER_GEMMA3) EMBER_GATEWAY=$(GO_EMBER_GATEWAY) $(PYTHON) tests/e2e/test_gateway.py

go-bench: model gateway
	$(GO_ENV) EMBER_GATEWAY=$(GO_EMBER_GATEWAY) $(PYTHON) scripts/bench-gateway.py

# Three gateways behind HAProxy: a replica killed and one drained under load, session affinity against round robin,
# three replicas against one (tests/scale/run.py; about two minutes on 2 cores).
test-scale: model gateway
	$(PYTHON) tests/scale/run.py --gateway $(GO_EMBER_GATEWAY) --json $(GO_EMBER_TARGET_DIR)/scale-report.json
