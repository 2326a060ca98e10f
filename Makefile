# The two commands: `make run` (the showdown) and `make test` (the full suite).
# Both install what they need (Debian 12, as root) and are safe to run again.

CARGO ?= cargo
BIN := target/release/wirespeed

.PHONY: run test deps build clean

deps:
	@bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --bins

run: build
	$(BIN) showdown

test: build
	bash scripts/test.sh

clean:
	$(CARGO) clean
