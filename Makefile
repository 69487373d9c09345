# trnsim developer entry points.
#
#   make deps    system packages (apt, only those missing) and the Python environment .venv
#   make build   trnsim_core, the C++ tests, the benchmarks and the `trnsim` package
#   make test    build, then ctest and pytest; non-zero exit on any failure
#   make bench   build, then every benchmark (each prints `BENCH <name> <value> <unit>` lines)
#   make fidelity  build, then the fidelity report (simulated vs published kernel timings)
#   make conformance  build, then every PyTorch OpInfo op on neuron vs CPU (table, totals,
#                build/conformance.json); fails on a crash or an unlisted failure
#   make demo    build, then examples/demo.py (or the C++ trnsim_demo)
#   make sanitize  the C++ core and its tests built with ASan and UBSan in build-asan/ (no
#                PyTorch backend), then ctest; fails on any sanitizer report
#   make sanitize-threads  the thread tests under TSan in build-tsan/; fails on any report
#   make clean   remove the build tree
#
# How the build works: there is one CMake tree, build/. `make build` runs
# `pip install --no-build-isolation -e .`, whose backend (scikit-build-core) configures and
# builds that tree with Ninja, tests and benchmarks included, and installs the package
# editable into .venv (Python sources are used in place from python/trnsim; the extension
# module and chip presets are installed). ctest and the benchmarks then run from build/.
# Rebuilds are incremental (the tree persists, and ccache keeps object files across cleans).
#
# Variables: JOBS (parallel compile jobs, default 2), TRNSIM_WITH_TORCH (ON by default: the
# PyTorch backend; OFF skips it), PYTHON3 (interpreter that creates .venv).

SHELL := /bin/bash
.DEFAULT_GOAL := build

JOBS ?= 2
TRNSIM_WITH_TORCH ?= ON
PYTHON3 ?= python3
BUILD_DIR := build
VENV := .venv
PYTHON := $(VENV)/bin/python

# The venv's tools (cmake, ninja, ctest, pytest) come first.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export CMAKE_BUILD_PARALLEL_LEVEL := $(JOBS)
# C++ executables run from here find the chip presets through this (ctest and the Python
# package set it themselves).
CONFIG_ENV := TRNSIM_CONFIG_DIR="$${TRNSIM_CONFIG_DIR:-$(CURDIR)/configs/chips}"

APT_PACKAGES := build-essential cmake ninja-build ccache pkg-config \
	libopenblas-dev libsleef-dev libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev \
	nlohmann-json3-dev pybind11-dev python3-dev python3-venv chromium
# expecttest: torch.testing._internal (PyTorch's OpInfo database, `make conformance`) imports it.
# transformers, diffusers, accelerate, torchtitan: real models and frameworks the tests run on the
# device; libcst: the port checker's rewriter; ml_dtypes: bf16/fp8 numpy arrays for NKI kernels.
PIP_PACKAGES := torch==2.13.0 numpy pytest hypothesis pyyaml rich matplotlib \
	pybind11 scikit-build-core ninja cmake expecttest \
	transformers==5.24.0 accelerate==1.15.0 diffusers==0.42.1 torchtitan==0.3.0 \
	libcst==1.9.0 ml_dtypes==0.7.0
# Holds the PIP_PACKAGES last installed; a change to the list reinstalls.
DEPS_STAMP := $(VENV)/.deps-stamp

SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: deps apt-deps venv-deps build test bench fidelity conformance demo sanitize sanitize-threads clean

deps: apt-deps venv-deps

apt-deps:
	@missing=""; \
	for pkg in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

venv-deps:
	@test -x $(PYTHON) || $(PYTHON3) -m venv $(VENV)
	@if [ "$$(cat $(DEPS_STAMP) 2>/dev/null)" != "$(PIP_PACKAGES)" ]; then \
	  $(PYTHON) -m pip install $(PIP_PACKAGES) && echo "$(PIP_PACKAGES)" > $(DEPS_STAMP); \
	fi

build: deps
	$(PYTHON) -m pip install --quiet --no-build-isolation --no-deps -e . \
	  -C build-dir=$(BUILD_DIR) \
	  -C cmake.define.TRNSIM_BUILD_TESTS=ON \
	  -C cmake.define.TRNSIM_BUILD_BENCH=ON \
	  -C cmake.define.TRNSIM_WITH_TORCH=$(TRNSIM_WITH_TORCH)

# Both suites run even if the first fails; the exit status reports either failure.
# pytest exits 5 when it collects no test, which fails this target too.
test: build
	@status=0; \
	ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j$(JOBS) || status=1; \
	$(PYTHON) -m pytest tests/python -q || status=1; \
	exit $$status

bench: build
	@for bench_name in $$(cat $(BUILD_DIR)/bench_targets.txt); do \
	  echo "== $$bench_name"; \
	  $(CONFIG_ENV) $(BUILD_DIR)/$$bench_name || exit 1; \
	done; \
	for script in bench/*.py; do \
	  [ -f "$$script" ] || continue; \
	  echo "== $$script"; \
	  $(PYTHON) "$$script" || exit 1; \
	done

fidelity: build
	$(CONFIG_ENV) $(BUILD_DIR)/trnsim_fidelity

conformance: build
	$(PYTHON) -m trnsim.conformance --jobs $(JOBS) --json $(BUILD_DIR)/conformance.json

demo: build
	@if [ -f examples/demo.py ]; then \
	  $(PYTHON) examples/demo.py; \
	elif [ -x $(BUILD_DIR)/trnsim_demo ]; then \
	  $(CONFIG_ENV) $(BUILD_DIR)/trnsim_demo; \
	else \
	  echo "no demo: neither examples/demo.py nor the trnsim_demo executable exists" >&2; exit 1; \
	fi

# Its own tree and flags: the sanitizers instrument every object, so nothing is shared with build/.
# ccache keys the objects by paths relative to the tree, so another clone (CI's) reuses them.
SANITIZE_DIR := build-asan
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g1
SANITIZE_CCACHE := CCACHE_BASEDIR=$(CURDIR) CCACHE_NOHASHDIR=1
sanitize: deps
	cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRNSIM_WITH_TORCH=OFF \
	  -DTRNSIM_BUILD_PYTHON=OFF -DTRNSIM_BUILD_BENCH=OFF -DTRNSIM_BUILD_TESTS=ON \
	  "-DCMAKE_CXX_FLAGS=$(SANITIZE_FLAGS)" "-DCMAKE_EXE_LINKER_FLAGS=$(SANITIZE_FLAGS)"
	$(SANITIZE_CCACHE) cmake --build $(SANITIZE_DIR) --target trnsim_tests -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(SANITIZE_DIR) --output-on-failure --no-tests=error -j$(JOBS)

# ThreadSanitizer on the layers the thread tests run concurrently (isa, sim, runtime, profiler) and
# on those tests (tests/cpp/test_runtime_threads.cpp); kernel, ops and compiler compile exactly as
# in build/, so after `make build` ccache has their objects. Fails on any report.
TSAN_DIR := build-tsan
sanitize-threads: deps
	cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ -DTRNSIM_WITH_TORCH=OFF \
	  -DTRNSIM_BUILD_PYTHON=OFF -DTRNSIM_BUILD_BENCH=OFF -DTRNSIM_BUILD_TESTS=ON \
	  "-DTRNSIM_SANITIZE_LAYERS=isa;sim;runtime;profiler" "-DTRNSIM_SANITIZE_LAYER_FLAGS=-fsanitize=thread -g1"
	cmake --build $(TSAN_DIR) --target trnsim_thread_tests -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(CONFIG_ENV) $(TSAN_DIR)/trnsim_thread_tests

clean:
	rm -rf $(BUILD_DIR) python/trnsim.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
