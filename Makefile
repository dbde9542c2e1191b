# ember: the two commands of the README, and their parts.
#   make demo   fetch the model, build the library, and answer a chat message with the C example (CPU backend)
#   make test   fetch the model, check formatting, lints and the header, run every test: Rust, C under ASan and
#               valgrind, Go (binding and gateway) and the gateway end to end with the official OpenAI client
.PHONY: demo test model lint rust-test chat

CARGO ?= cargo

model:
	@scripts/fetch-model.sh >/dev/null

demo: c-demo

# The same answer from the Rust command-line tool, with its speed.
chat: model
	$(CARGO) run --release --quiet --bin ember-cli -- chat "What is the boiling point of water in Celsius?"

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --all-targets -- -D warnings

rust-test: model
	$(CARGO) test --release

test: lint rust-test c-test go-test

include c.mk
include go.mk
