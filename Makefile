# evstore — build, test, benchmark.
#
#   make test    install what is missing, build, run every test
#   make run     install what is missing, build release, run evstored in the foreground
#   make bench   release-build the benchmarks and run them on the shared field workload
#   make test-tsan / make test-asan   the suite under the thread / address sanitizer

SWIFT        ?= swift
DEBIAN_PKGS  := liblmdb-dev libzstd-dev
SSH_PKGS     := openssh-client openssh-server
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
WORKLOAD     ?= $(firstword $(wildcard ../shared/workload/fieldops.py) $(wildcard shared/workload/fieldops.py))
BENCH_EVENTS ?= 100000
BENCH_SINGLE ?= 100000
# Events in the large store of the socket benchmark (memory, start to READY); 0 skips it.
BENCH_LARGE  ?= 1000000
# The socket benchmark's clients run on CPU 1 and the daemon on CPU 0, so they do not
# compete for a core (as a client on another core or machine would not).
PIN_CLIENTS  := $(shell command -v taskset >/dev/null && [ "$$(nproc)" -ge 2 ] && echo "taskset -c 1")
BENCH_OUT    ?= .build/bench

.PHONY: all deps build release run test test-tsan test-asan bench clean format

all: build

# Installs the Debian packages the build links against, only when pkg-config cannot find them.
# openssh-client carries ssh:// peers; openssh-server lets the tests run a real sshd on 127.0.0.1.
deps:
	@if ! pkg-config --exists lmdb libzstd 2>/dev/null || ! command -v ssh >/dev/null || [ ! -x /usr/sbin/sshd ]; then \
		echo "installing $(DEBIAN_PKGS) $(SSH_PKGS)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(DEBIAN_PKGS) $(SSH_PKGS) pkg-config; \
	fi

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

# Runs the daemon in the foreground on the default data directory and socket
# ($$XDG_STATE_HOME / $$XDG_RUNTIME_DIR, or ./.evstore when they are unset). Ctrl-C stops it.
run: release
	@echo "evstored starts in the foreground (Ctrl-C stops it). In another terminal here, try:"
	@echo "  .build/release/evctl append job/42 status en_route && .build/release/evctl get job/42"
	@echo
	.build/release/evstored

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

# The whole suite under the thread and the address sanitizer (separate build directories).
test-tsan: deps
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build/tsan
	TSAN_OPTIONS=suppressions=$(CURDIR)/Tests/Sanitizers/tsan.supp EVSTORE_BIN_DIR=.build/tsan/debug \
		$(SWIFT) test --skip-build --sanitize=thread --scratch-path .build/tsan

test-asan: deps
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build/asan
	ASAN_OPTIONS=detect_leaks=0 EVSTORE_BIN_DIR=.build/asan/debug \
		$(SWIFT) test --skip-build --sanitize=address --scratch-path .build/asan

bench: deps
	$(SWIFT) build -c release
	@mkdir -p $(BENCH_OUT)
	@test -n "$(WORKLOAD)" || { echo "fieldops.py not found: set WORKLOAD=path/to/fieldops.py"; exit 1; }
	python3 $(WORKLOAD) --events $(BENCH_EVENTS) > $(BENCH_OUT)/workload.ndjson
	.build/release/evstore-bench --workload $(BENCH_OUT)/workload.ndjson --single $(BENCH_SINGLE) \
		--dir $(BENCH_OUT)/stores --json $(BENCH_OUT)/results.json
	@if [ "$(BENCH_LARGE)" != 0 ]; then python3 $(WORKLOAD) --events $(BENCH_LARGE) --seed 7 > $(BENCH_OUT)/large.ndjson; fi
	$(PIN_CLIENTS) .build/release/evstore-socket-bench --bin .build/release --workload $(BENCH_OUT)/workload.ndjson \
		$(if $(filter-out 0,$(BENCH_LARGE)),--large $(BENCH_OUT)/large.ndjson) \
		--dir $(BENCH_OUT)/daemons --json $(BENCH_OUT)/socket-results.json

format:
	$(SWIFT) format --in-place --recursive Sources Tests Benchmarks

clean:
	rm -rf .build
