# ember's C side, included from the root Makefile (`include c.mk`).
#   make c-test          the C API test against the shared and the static library under AddressSanitizer + UBSan
#                        (full test), and against the shared one under valgrind (short prompts: each token costs
#                        seconds there; the static library holds the same code, and ASan covers both linkages),
#                        in two halves at once; then the event-driven test (tests/c/test_events.c) likewise, the
#                        prompt-progress test (tests/c/test_prompt_progress.c) under ASan, and the embeddings test
#                        (tests/c/test_embed.c, on synthetic encoders) under ASan
#   make c-test-valgrind c-test, then the embeddings test under valgrind too
#   make c-examples      build examples/c/chat.c, examples/c/embed.c, examples/cpp/chat.cpp and
#                        examples/cpp/epoll_server.cpp
#   make c-demo          build the release library and the C example, and answer a chat message with it
#   make header-check    fail if include/ember.h differs from what the pinned cbindgen generates from src/ffi/
#   make header          regenerate include/ember.h
#   make install PREFIX=/usr/local [DESTDIR=...]   header, libraries, pkg-config file, CMake package and the Go
#                        binding as a module proxy (share/ember/go-proxy)
#   make install-check   install into a scratch directory and check it as packagers and linkers see it
# The model comes from the root Makefile's `model` target (EMBER_MODEL overrides its path).

CARGO ?= cargo
EMBER_CC ?= gcc
EMBER_CXX ?= g++
VALGRIND ?= valgrind
PREFIX ?= /usr/local

# Where cargo puts the library (it honours CARGO_TARGET_DIR), and where the C programs go.
EMBER_TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
EMBER_LIB_DIR := $(abspath $(EMBER_TARGET_DIR)/release)
EMBER_C_OUT := $(abspath $(EMBER_TARGET_DIR)/c)
EMBER_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
EMBER_VERSION_MAJOR := $(word 1,$(subst ., ,$(EMBER_VERSION)))
EMBER_VERSION_MINOR := $(word 2,$(subst ., ,$(EMBER_VERSION)))

# What a program linked with libember.a needs from the system: `cargo rustc --release --lib --crate-type
# staticlib -- --print native-static-libs`.
EMBER_STATIC_DEPS := -lgcc_s -lutil -lrt -lpthread -lm -ldl
EMBER_SHARED := -L$(EMBER_LIB_DIR) -lember -Wl,-rpath,$(EMBER_LIB_DIR) -lpthread -lm
EMBER_STATIC := $(EMBER_LIB_DIR)/libember.a $(EMBER_STATIC_DEPS)

EMBER_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -g -Iinclude
EMBER_CXXFLAGS := -std=c++17 -Wall -Wextra -Werror -O2 -Iinclude -Iexamples/cpp
EMBER_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# --fair-sched=yes: valgrind runs one thread at a time, and by default a busy engine thread can keep the CPU for
# a whole generation while the host thread it woke waits; fair scheduling interleaves them as real cores would.
EMBER_VALGRIND := $(VALGRIND) --error-exitcode=1 --leak-check=full --fair-sched=yes --suppressions=tests/c/valgrind.supp

# Runs test program $(1) under valgrind with arguments $(3), valgrind's report in a file named after $(1) and $(2):
# on failure the report comes first and the program's own output (which names the failed CHECK) last, so the end
# of a CI log shows the cause, not a leak summary of the exit that followed it. Its status is the run's, so that
# two runs can go in parallel.
define ember_valgrind_run
$(EMBER_VALGRIND) --log-file=$(EMBER_C_OUT)/$(1).$(2).valgrind.log $(EMBER_C_OUT)/$(1) $(3) \
	> $(EMBER_C_OUT)/$(1).$(2).out 2>&1 \
	&& tail -n 3 $(EMBER_C_OUT)/$(1).$(2).out && grep 'ERROR SUMMARY' $(EMBER_C_OUT)/$(1).$(2).valgrind.log \
	|| { head -n 150 $(EMBER_C_OUT)/$(1).$(2).valgrind.log; echo '--- program output ---'; \
	     cat $(EMBER_C_OUT)/$(1).$(2).out; false; }
endef

.PHONY: c-lib c-test c-test-valgrind c-examples c-demo header-check header install install-check

# The library, and the link by its SONAME (build.rs) that programs linked with -lember ask the loader for.
c-lib:
	$(CARGO) build --release --lib
	ln -sf libember.so $(EMBER_LIB_DIR)/libember.so.$(EMBER_VERSION_MAJOR)

c-test: model vocabs c-lib
	@mkdir -p $(EMBER_C_OUT)
	$(EMBER_CC) $(EMBER_CFLAGS) $(EMBER_SANITIZE) tests/c/test_api.c -o $(EMBER_C_OUT)/test_api_asan_shared $(EMBER_SHARED)
	$(EMBER_CC) $(EMBER_CFLAGS) $(EMBER_SANITIZE) tests/c/test_api.c -o $(EMBER_C_OUT)/test_api_asan_static $(EMBER_STATIC)
	$(EMBER_CC) $(EMBER_CFLAGS) -O1 tests/c/test_api.c -o $(EMBER_C_OUT)/test_api_shared $(EMBER_SHARED)
	ASAN_OPTIONS=detect_leaks=1 $(EMBER_C_OUT)/test_api_asan_shared 2
	ASAN_OPTIONS=detect_leaks=1 $(EMBER_C_OUT)/test_api_asan_static 2
	EMBER_MODEL=models/gemma-3-270m-q4_k_m.gguf ASAN_OPTIONS=detect_leaks=1 $(EMBER_C_OUT)/test_api_asan_shared 2
	@# valgrind runs one thread at a time: the test's two halves run as two processes, one per core.
	$(call ember_valgrind_run,test_api_shared,1,1 --short 1) & first=$$!; \
	$(call ember_valgrind_run,test_api_shared,2,1 --short 2); second=$$?; \
	wait $$first && [ $$second = 0 ]
	@# One thread serving every request through the waiting point (engine_wait_events on an epoll loop): 1,000
	@# requests under ASan on the real model; 1,000 under valgrind on a tiny synthetic model (2 layers of width 64:
	@# each token of the real model costs ~100x more there, and what is checked is the event path).
	$(EMBER_CC) $(EMBER_CFLAGS) $(EMBER_SANITIZE) tests/c/test_events.c -o $(EMBER_C_OUT)/test_events_asan $(EMBER_STATIC)
	$(EMBER_CC) $(EMBER_CFLAGS) -O1 tests/c/test_events.c -o $(EMBER_C_OUT)/test_events_shared $(EMBER_SHARED)
	ASAN_OPTIONS=detect_leaks=1 $(EMBER_C_OUT)/test_events_asan 1000 2
	$(CARGO) build --release --bin ember-cli
	$(EMBER_TARGET_DIR)/release/ember-cli synthetic $(EMBER_C_OUT)/tiny.gguf --tiny
	EMBER_MODEL=$(EMBER_C_OUT)/tiny.gguf $(call ember_valgrind_run,test_events_shared,1000,1000 1)
	@# Prompt progress (return_progress) through engine_poll and engine_next_chunk_json, under ASan.
	$(EMBER_CC) $(EMBER_CFLAGS) $(EMBER_SANITIZE) tests/c/test_prompt_progress.c -o $(EMBER_C_OUT)/test_prompt_progress_asan $(EMBER_SHARED)
	ASAN_OPTIONS=detect_leaks=1 $(EMBER_C_OUT)/test_prompt_progress_asan
	@# Embeddings and reranking (engine_embed_vectors, engine_rerank_scores and their result handle) on synthetic
	@# one-layer encoders with llama.cpp's BERT vocabulary, under ASan (both libraries, leaks included); then the
	@# example. Under valgrind too in `make c-test-valgrind` (37 s on 2 cores: out of make test's 25 minutes).
	$(EMBER_TARGET_DIR)/release/ember-cli synthetic $(EMBER_C_OUT)/bge-small.gguf --family bge-small --layers 1 \
		--seed 3 --vocab .cache/llamacpp/vocab/ggml-vocab-bert-bge.gguf
	$(EMBER_TARGET_DIR)/release/ember-cli synthetic $(EMBER_C_OUT)/bge-small-rerank.gguf --family bge-small-rerank \
		--layers 1 --seed 3 --vocab .cache/llamacpp/vocab/ggml-vocab-bert-bge.gguf
	$(EMBER_CC) $(EMBER_CFLAGS) $(EMBER_SANITIZE) tests/c/test_embed.c -o $(EMBER_C_OUT)/test_embed_asan_shared $(EMBER_SHARED)
	$(EMBER_CC) $(EMBER_CFLAGS) $(EMBER_SANITIZE) tests/c/test_embed.c -o $(EMBER_C_OUT)/test_embed_asan_static $(EMBER_STATIC)
	$(EMBER_CC) $(EMBER_CFLAGS) -O1 tests/c/test_embed.c -o $(EMBER_C_OUT)/test_embed_shared $(EMBER_SHARED)
	ASAN_OPTIONS=detect_leaks=1 $(EMBER_C_OUT)/test_embed_asan_shared $(EMBER_C_OUT)/bge-small.gguf $(EMBER_C_OUT)/bge-small-rerank.gguf
	ASAN_OPTIONS=detect_leaks=1 $(EMBER_C_OUT)/test_embed_asan_static $(EMBER_C_OUT)/bge-small.gguf $(EMBER_C_OUT)/bge-small-rerank.gguf
	$(EMBER_CC) $(EMBER_CFLAGS) -O2 examples/c/embed.c -o $(EMBER_C_OUT)/embed $(EMBER_SHARED)
	$(EMBER_C_OUT)/embed $(EMBER_C_OUT)/bge-small.gguf "The cat sat on the mat." "A cat sat on a mat." "Stocks fell."
	@# The C++ epoll server example: 1,000 clients at once, one serving thread.
	$(EMBER_CXX) $(EMBER_CXXFLAGS) examples/cpp/epoll_server.cpp -o $(EMBER_C_OUT)/epoll_server $(EMBER_SHARED)
	python3 tests/c/epoll_server_check.py $(EMBER_C_OUT)/epoll_server 1000
	tests/c/check_install.sh

# tests/c/test_embed.c under valgrind (the embeddings' C calls; c-test runs it under ASan).
c-test-valgrind: c-test
	$(call ember_valgrind_run,test_embed_shared,1,$(EMBER_C_OUT)/bge-small.gguf $(EMBER_C_OUT)/bge-small-rerank.gguf)

c-examples: c-lib
	@mkdir -p $(EMBER_C_OUT)
	$(EMBER_CC) $(EMBER_CFLAGS) -O2 examples/c/chat.c -o $(EMBER_C_OUT)/chat $(EMBER_SHARED)
	$(EMBER_CC) $(EMBER_CFLAGS) -O2 examples/c/embed.c -o $(EMBER_C_OUT)/embed $(EMBER_SHARED)
	$(EMBER_CXX) $(EMBER_CXXFLAGS) examples/cpp/chat.cpp -o $(EMBER_C_OUT)/chat_cpp $(EMBER_SHARED)
	$(EMBER_CXX) $(EMBER_CXXFLAGS) examples/cpp/epoll_server.cpp -o $(EMBER_C_OUT)/epoll_server $(EMBER_SHARED)

# A question the 135M model answers well under greedy decoding (some, such as "What is the capital of France?",
# send it into a loop, as they do llama.cpp: see tests/fixtures/greedy_ref.json).
c-demo: model c-examples
	$(EMBER_C_OUT)/chat "What is the boiling point of water in Celsius?"

header-check:
	$(CARGO) test --release --test header

header:
	EMBER_BLESS_HEADER=1 $(CARGO) test --release --test header

# DESTDIR stages the files elsewhere (packaging); PREFIX is what the pkg-config file names. The shared library
# is libember.so.MAJOR.MINOR.PATCH, with the links libember.so.MAJOR (its SONAME: what programs load) and
# libember.so (what -lember finds at link time).
EMBER_LIBDIR = $(DESTDIR)$(PREFIX)/lib
install: c-lib
	install -d $(DESTDIR)$(PREFIX)/include $(EMBER_LIBDIR)/pkgconfig $(EMBER_LIBDIR)/cmake/ember
	install -m 644 include/ember.h $(DESTDIR)$(PREFIX)/include/ember.h
	install -m 755 $(EMBER_LIB_DIR)/libember.so $(EMBER_LIBDIR)/libember.so.$(EMBER_VERSION)
	ln -sf libember.so.$(EMBER_VERSION) $(EMBER_LIBDIR)/libember.so.$(EMBER_VERSION_MAJOR)
	ln -sf libember.so.$(EMBER_VERSION_MAJOR) $(EMBER_LIBDIR)/libember.so
	install -m 644 $(EMBER_LIB_DIR)/libember.a $(EMBER_LIBDIR)/libember.a
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(EMBER_VERSION)|g' packaging/ember.pc.in \
		> $(EMBER_LIBDIR)/pkgconfig/ember.pc
	for file in emberConfig emberConfigVersion; do \
		sed -e 's|@VERSION@|$(EMBER_VERSION)|g' -e 's|@VERSION_MAJOR@|$(EMBER_VERSION_MAJOR)|g' \
			-e 's|@VERSION_MINOR@|$(EMBER_VERSION_MINOR)|g' packaging/$$file.cmake.in \
			> $(EMBER_LIBDIR)/cmake/ember/$$file.cmake || exit 1; \
	done
	@# The Go binding as a module proxy: a Go program elsewhere requires it with no checkout (docs/go.md).
	python3 packaging/go_module_proxy.py $(DESTDIR)$(PREFIX)/share/ember/go-proxy $(EMBER_VERSION) >/dev/null

# The installed library as packagers and linkers see it: layout and links, SONAME, exported symbols, and a
# program built against it with pkg-config and with CMake (tests/c/check_install.sh).
install-check: c-lib
	tests/c/check_install.sh
