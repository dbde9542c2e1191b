# ember: the two commands of the README, and their parts.
#   make demo   fetch the model, build, print the model facts and a tokenized chat prompt
#   make test   fetch the model, check formatting and lints, run every test
.PHONY: demo test model lint rust-test

CARGO ?= cargo

model:
	@scripts/fetch-model.sh >/dev/null

demo: model
	$(CARGO) run --release --quiet --bin ember-cli -- info "What is the capital of France?"

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --all-targets -- -D warnings

rust-test: model
	$(CARGO) test --release

test: lint rust-test
