# The two commands: `make run` (the showdown) and `make test` (the full suite).
# Both install what they need (Debian 12, as root) and are safe to run again.

CARGO ?= cargo
BIN := target/release/wirespeed
# The DPDK driver and `--stack dpdk` (libdpdk-dev comes with `make deps`); scripts/test.sh
# builds the suite with the same features.
FEATURES := wirespeed/dpdk,wirespeed-net/dpdk,wirespeed-nic/dpdk

.PHONY: run test deps build clean

deps:
	@bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --bins --features $(FEATURES)

run: build
	$(BIN) showdown

test: build
	bash scripts/test.sh

clean:
	$(CARGO) clean
