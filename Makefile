# evstore — build, test, benchmark.
#
#   make test    install what is missing, build, run every test
#   make run     install what is missing, build release, run evstored in the foreground
#   make bench   release-build the benchmarks and run them, with their baselines (SQLite,
#                bare LMDB, Redis Streams), on the shared field workload
#   make test-tsan / make test-asan   the suite under the thread / address sanitizer
#   make fuzz    build the libFuzzer fuzzers (Fuzz/) and run each for FUZZ_SECONDS
#   make fuzz-short   the same, each for FUZZ_SHORT_SECONDS (what CI runs)
#   make fuzz-seeds   write the fuzzers' seed corpora (Fuzz/Corpus) afresh and replay them
#   make torture / make soak   kill -9 the daemon 1000 times / 30 minutes of load on three
#                syncing nodes (release); torture-short / soak-short: the CI versions (debug);
#                torture also syncs 20,000 events over the degraded link (as root)
#   make deb     the Debian packages (.build/deb/package/evstore_VERSION_ARCH.deb and
#                evstore-nats_VERSION_ARCH.deb); test-deb checks their size (binaries <= 16 MiB,
#                no ICU; each package <= 8 MiB), runs lintian on them, installs them into a
#                fresh debootstrap root and tests the upgrade from the previous release's package
#   make previous-deb   the previous release's package, built from the repository's history
#                into .build/previous/<hash>/deb (cached), for test-deb's upgrade test
#   make man     the manual pages (.build/man); man-sources regenerates man/*.scd from --help
#   make test-python   the Python client's tests against the built daemon
#   make version VERSION=x.y.z   sets the one version (Sources/Version/Version.swift) and
#                its copies in the Python client, the docs' examples and the manual pages
#   make previous-release   evstored and evctl of the previous release, built from the repository's
#                history into .build/previous/<hash> (cached), for the sync tests against it

SWIFT        ?= swift
# libnats-dev is the NATS C client evstore-nats links; libssl-dev the libcrypto headers it
# derives an NKey's public key with (libnats links libcrypto already).
DEBIAN_PKGS  := liblmdb-dev libzstd-dev libnats-dev libssl-dev
SSH_PKGS     := openssh-client openssh-server
# The clock tests run the real daemon with its wall clock moved (libfaketime); the completion
# tests run the bash and zsh scripts; scdoc and man render and check the manual pages.
# iproute2 (ip) makes the network namespaces of the network-change and degraded-link tests.
# nats-server (with JetStream) is the real server the bridge's tests publish to.
TEST_PKGS    := libfaketime zsh bash-completion scdoc man-db iproute2 nats-server
# The baselines of `make bench`: a C compiler, SQLite and hiredis headers, a Redis server.
BENCH_PKGS   := gcc libsqlite3-dev libhiredis-dev redis-server
# `make deb` builds with dpkg-deb, dpkg-shlibdeps and scdoc; `make test-deb` checks with
# lintian and installs into a debootstrap root.
DEB_PKGS     := dpkg-dev scdoc binutils lintian debootstrap
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
WORKLOAD     ?= $(firstword $(wildcard ../shared/workload/fieldops.py) $(wildcard shared/workload/fieldops.py))
BENCH_EVENTS ?= 100000
BENCH_SINGLE ?= 100000
# Events the SQLite baseline appends one per transaction, in each synchronous mode.
BENCH_SQLITE_SINGLE ?= 10000
# Events in the large store of the socket benchmark (memory, start to READY); 0 skips it.
BENCH_LARGE  ?= 1000000
BENCH_OUT    ?= .build/bench
RELEASE_PRODUCTS := evstored evctl evstore-nats
BENCH_PRODUCTS := evstored evctl evstore-nats evstore-bench evstore-socket-bench

# The crash and soak harnesses (Tests/Harness, docs/testing.md). Figures go to HARNESS_OUT.
TORTURE_KILLS ?= 1000
SOAK_MINUTES  ?= 30
HARNESS_OUT   ?= .build/harness
HARNESS_ARGS  ?=
HARNESS_PRODUCTS := evstored

# The previous release, whose commit Tests/Interop/previous-release pins: PreviousReleaseTests
# syncs this release with its evstored and evctl, read from EVSTORE_PREVIOUS_BIN_DIR.
PREVIOUS_RELEASE := $(shell grep -E -m 1 '^[0-9a-f]{40}$$' Tests/Interop/previous-release)
EVSTORE_PREVIOUS_BIN_DIR ?= $(CURDIR)/.build/previous/$(PREVIOUS_RELEASE)
export EVSTORE_PREVIOUS_BIN_DIR

.PHONY: version all deps bench-deps deb-deps build release run test test-tsan test-asan bench clean format \
	torture torture-short degraded-link soak soak-short fuzz-build fuzz fuzz-short fuzz-seeds deb test-deb man man-sources test-python \
	previous-release previous-deb

all: build

# Installs the Debian packages the build links against, only when pkg-config cannot find them.
# openssh-client carries ssh:// peers; openssh-server lets the tests run a real sshd on 127.0.0.1;
# libfaketime moves the daemon's clock in the clock tests; zsh and bash-completion run the completion scripts.
deps:
	@if ! pkg-config --exists lmdb libzstd libnats libcrypto 2>/dev/null || ! command -v ssh >/dev/null || [ ! -x /usr/sbin/sshd ] \
			|| ! dpkg -s $(TEST_PKGS) >/dev/null 2>&1; then \
		echo "installing $(DEBIAN_PKGS) $(SSH_PKGS) $(TEST_PKGS)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
			$(DEBIAN_PKGS) $(SSH_PKGS) $(TEST_PKGS) pkg-config; \
	fi

# What the benchmark baselines need, installed only when missing (LMDB and zstd come from deps).
bench-deps:
	@if ! pkg-config --exists sqlite3 hiredis 2>/dev/null || ! command -v redis-server >/dev/null \
			|| ! command -v cc >/dev/null; then \
		echo "installing $(BENCH_PKGS)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(BENCH_PKGS) pkg-config; \
	fi

# What the package build and its test need, installed only when missing.
deb-deps:
	@if ! command -v dpkg-shlibdeps >/dev/null || ! command -v scdoc >/dev/null || ! command -v strip >/dev/null \
			|| ! command -v lintian >/dev/null || ! command -v debootstrap >/dev/null; then \
		echo "installing $(DEB_PKGS)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(DEB_PKGS); \
	fi

build: deps
	$(SWIFT) build

# The products one at a time: a plain `swift build -c release` would build every target,
# the tests' support libraries too, and those import the store's module for testing, which
# a release build does not allow.
release: deps
	@for product in $(RELEASE_PRODUCTS); do $(SWIFT) build -c release --product $$product || exit 1; done

# Runs the daemon in the foreground on the default data directory and socket
# ($$XDG_STATE_HOME / $$XDG_RUNTIME_DIR, or ./.evstore when they are unset). Ctrl-C stops it.
run: release
	@echo "evstored starts in the foreground (Ctrl-C stops it). In another terminal here, try:"
	@echo "  .build/release/evctl append job/42 status en_route && .build/release/evctl get job/42"
	@echo
	.build/release/evstored

# Every test: the Swift suite, then the short modes of the crash and soak harnesses and of
# the fuzzers (docs/testing.md, docs/fuzzing.md).
test: deps previous-release
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build
	$(MAKE) --no-print-directory test-python torture-short soak-short fuzz-short test-deb

# evstored and evctl of the previous release, built from its commit in the repository's
# history (Tests/Interop/build-previous.sh: a tree of its own under .build/previous, a debug
# build with its own scratch path, nothing of the current tree or .build/debug). Cached: does
# nothing when both binaries are there. Where the clone lacks the commit (a shallow clone) it
# fails, saying how to fetch it.
previous-release: deps
	SWIFT=$(SWIFT) Tests/Interop/build-previous.sh $(EVSTORE_PREVIOUS_BIN_DIR)

# The Python client (clients/python) against the daemon of the debug build.
test-python: deps
	@for product in evstored evctl; do $(SWIFT) build --product $$product || exit 1; done
	EVSTORE_BIN_DIR=$(CURDIR)/.build/debug clients/python/run-tests.sh

# The whole suite under the thread and the address sanitizer (separate build directories).
test-tsan: deps previous-release
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build/tsan
	TSAN_OPTIONS=suppressions=$(CURDIR)/Tests/Sanitizers/tsan.supp EVSTORE_BIN_DIR=.build/tsan/debug \
		$(SWIFT) test --skip-build --sanitize=thread --scratch-path .build/tsan

test-asan: deps previous-release
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build/asan
	ASAN_OPTIONS=detect_leaks=0:suppressions=$(CURDIR)/Tests/Sanitizers/asan.supp EVSTORE_BIN_DIR=.build/asan/debug \
		$(SWIFT) test --skip-build --sanitize=address --scratch-path .build/asan

# The fuzzers (docs/fuzzing.md): a package of their own in Fuzz/, built with libFuzzer and the
# address sanitizer into FUZZ_SCRATCH, linked with lld (gold fails on these binaries). One
# product at a time: building the whole package would build the main package's executables too.
FUZZ_SECONDS       ?= 300
FUZZ_SHORT_SECONDS ?= 25
FUZZ_SCRATCH       ?= .build/fuzz
FUZZERS            ?= request event stored-value projection-record sync-stream
FUZZ_PRODUCTS      := FuzzRequest FuzzEvent FuzzStoredValue FuzzProjectionRecord FuzzSyncStream

fuzz-build: deps
	@for product in $(FUZZ_PRODUCTS); do \
		$(SWIFT) build -c release --package-path Fuzz --scratch-path $(FUZZ_SCRATCH) \
			-Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -use-ld=lld \
			--product $$product || exit 1; \
	done

fuzz: fuzz-build
	Fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_SCRATCH)/release $(FUZZ_SCRATCH)/runs $(FUZZERS)

fuzz-short: fuzz-build
	Fuzz/run.sh $(FUZZ_SHORT_SECONDS) $(FUZZ_SCRATCH)/release $(FUZZ_SCRATCH)/runs $(FUZZERS)

# The seeds: request and event from the field workload (Fuzz/seeds.py); stored-value,
# projection-record and sync-stream from what the store and the sync session encode, written by the corpus tests
# before they replay them when EVSTORE_WRITE_FUZZ_SEEDS is set (docs/fuzzing.md).
fuzz-seeds: deps
	python3 Fuzz/seeds.py
	$(SWIFT) build --build-tests
	EVSTORE_WRITE_FUZZ_SEEDS=1 $(SWIFT) test --skip-build --filter 'FuzzCorpusTests'

# Benchmarks/suite.py builds the C baselines, generates the workloads when missing, runs
# everything (the daemon and redis-server on CPU 0, their clients on CPU 1), prints the
# figures and the targets, and writes $(BENCH_OUT)/suite.json. `swift build --product`
# takes one product, hence the loop.
bench: deps bench-deps
	@for product in $(BENCH_PRODUCTS); do $(SWIFT) build -c release --product $$product || exit 1; done
	python3 Benchmarks/suite.py --events $(BENCH_EVENTS) --single $(BENCH_SINGLE) \
		--sqlite-single $(BENCH_SQLITE_SINGLE) --large $(BENCH_LARGE) --out $(BENCH_OUT) \
		$(if $(WORKLOAD),--fieldops $(WORKLOAD))

# `swift build --product` takes one product, hence the loops.
torture: deps
	@for product in $(HARNESS_PRODUCTS); do $(SWIFT) build -c release --product $$product || exit 1; done
	@mkdir -p $(HARNESS_OUT)
	python3 Tests/Harness/torture.py --kills $(TORTURE_KILLS) --bin .build/release \
		--json $(HARNESS_OUT)/torture.json $(HARNESS_ARGS)
	$(MAKE) --no-print-directory degraded-link

# The degraded-link tests (ssh:// through 300 ms, 5 % loss, 1 Mbit/s) at full size: 20,000
# events (the normal suite runs 4,000). Root only; skipped otherwise.
DEGRADED_EVENTS ?= 20000
degraded-link: deps
	EVSTORE_DEGRADED_EVENTS=$(DEGRADED_EVENTS) $(SWIFT) test --filter DegradedLinkTests

torture-short: deps
	@for product in $(HARNESS_PRODUCTS); do $(SWIFT) build --product $$product || exit 1; done
	@mkdir -p $(HARNESS_OUT)
	python3 Tests/Harness/torture.py --short --bin .build/debug --json $(HARNESS_OUT)/torture-short.json $(HARNESS_ARGS)

soak: deps
	@for product in $(HARNESS_PRODUCTS); do $(SWIFT) build -c release --product $$product || exit 1; done
	@mkdir -p $(HARNESS_OUT)
	python3 Tests/Harness/soak.py --minutes $(SOAK_MINUTES) --bin .build/release \
		--json $(HARNESS_OUT)/soak.json $(HARNESS_ARGS)

soak-short: deps
	@for product in $(HARNESS_PRODUCTS); do $(SWIFT) build --product $$product || exit 1; done
	@mkdir -p $(HARNESS_OUT)
	python3 Tests/Harness/soak.py --short --bin .build/debug --json $(HARNESS_OUT)/soak-short.json $(HARNESS_ARGS)

# The Debian packages (docs/packaging.md): evstored, evctl and evstore-nats built in release
# with the Swift runtime linked statically, then packaging/build-deb.sh (dpkg-deb, no network).
DEB_SCRATCH ?= .build/deb
# Linked by lld (the toolchain's) with -z pack-relative-relocs: the relative relocations of
# the position-independent binaries go in a bitmap (DT_RELR, glibc 2.36) instead of 24 bytes
# each, 0.9 MiB less per binary. -z now is full RELRO. (SwiftPM's release build already
# passes --gc-sections; docs/packaging.md has the sizes.)
DEB_LINK     ?= -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs -Xlinker -z -Xlinker now
deb: deps deb-deps
	@for product in evstored evctl evstore-nats; do \
		$(SWIFT) build -c release --static-swift-stdlib $(DEB_LINK) --scratch-path $(DEB_SCRATCH) \
			--product $$product || exit 1; \
	done
	packaging/build-deb.sh $(DEB_SCRATCH)/release $(DEB_SCRATCH)/package

# The previous release's package, from its commit in the repository's history
# (packaging/build-previous-deb.sh: a tree of its own under .build/previous, built the way
# that commit's `make deb` built it, with its own build-deb.sh). Cached: does nothing when the
# package is there.
PREVIOUS_DEB_DIR ?= .build/previous/$(PREVIOUS_RELEASE)/deb
previous-deb: deps deb-deps
	SWIFT=$(SWIFT) packaging/build-previous-deb.sh $(PREVIOUS_DEB_DIR)

test-deb: deb previous-deb
	PREVIOUS_DEB="$$(ls $(PREVIOUS_DEB_DIR)/evstore_*.deb)" packaging/test-deb.sh \
		$(DEB_SCRATCH)/package/evstore_*.deb $(DEB_SCRATCH)/package/evstore-nats_*.deb

# The manual pages from their scdoc sources in man/, into .build/man (`man -l` reads them).
man: deb-deps
	@mkdir -p .build/man
	scdoc <man/evctl.1.scd >.build/man/evctl.1
	scdoc <man/evstored.8.scd >.build/man/evstored.8
	scdoc <man/evstore-nats.8.scd >.build/man/evstore-nats.8

# The scdoc sources are generated from the same definitions as --help; a test fails when they
# differ from what the binaries print, and this brings them back in step.
man-sources: deps
	@for product in evstored evctl evstore-nats; do $(SWIFT) build --product $$product || exit 1; done
	.build/debug/evctl --generate-manual >man/evctl.1.scd
	.build/debug/evstored --generate-manual >man/evstored.8.scd
	.build/debug/evstore-nats --generate-manual >man/evstore-nats.8.scd

# The programs read the version from Sources/Version/Version.swift and the Debian packages
# from the programs; the Python client needs its own copies (VersionTests holds them equal).
version:
	@echo "$(VERSION)" | grep -Eqx '[0-9]+\.[0-9]+\.[0-9]+' || { echo "usage: make version VERSION=x.y.z" >&2; exit 2; }
	sed -i -E 's/(current = ")[^"]*"/\1$(VERSION)"/' Sources/Version/Version.swift
	sed -i -E 's/^version = "[^"]*"/version = "$(VERSION)"/' clients/python/pyproject.toml
	sed -i -E 's/^__version__ = "[^"]*"/__version__ = "$(VERSION)"/' clients/python/evstore/__init__.py
	sed -i -E 's/("started_at":[0-9]+,"version":")[^"]*"/\1$(VERSION)"/' docs/api.md
	sed -i -E 's|(apt install \./evstore_)[0-9.]+-|\1$(VERSION)-|' docs/operations.md
	$(MAKE) man-sources

format:
	$(SWIFT) format --in-place --recursive Sources Tests Benchmarks

clean:
	rm -rf .build
