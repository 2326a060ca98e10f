# The two commands: `make run` (the showdown) and `make test` (the full suite).
# Both install what they need (Debian 12, as root) and are safe to run again.

CARGO ?= cargo
BIN := target/release/wirespeed
# The DPDK driver and `--stack dpdk` (libdpdk-dev comes with `make deps`); scripts/test.sh
# builds the suite with the same features.
FEATURES := wirespeed/dpdk,wirespeed-net/dpdk,wirespeed-nic/dpdk

.PHONY: run test deps build clean deb

deps:
	@bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --bins --features $(FEATURES)

run: build
	$(BIN) showdown

test: build
	bash scripts/test.sh

# The Debian package of the release binary: target/deb/wirespeed_VERSION_ARCH.deb (binary,
# systemd units, /etc/default files, man pages, bash completion; scripts/deb.sh).
deb: build
	bash scripts/deb.sh $(BIN) target/deb

clean:
	$(CARGO) clean
