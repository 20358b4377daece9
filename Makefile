# Loom: the commands in README.md.
#   make          build into build/ (the command is build/bin/loom)
#   make demo     install what is missing, build, run the demo on a local cluster
#   make test     install what is missing, build, run every test (also a sanitizer build)
#   make install  put loom, libloom and loom.h under $(PREFIX)
BUILD      ?= build
ASAN_BUILD ?= build-asan
PREFIX     ?= /usr/local
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE      ?= cmake
CTEST      ?= ctest
PYTHON     ?= python3
CTEST_ARGS ?= --output-on-failure --no-tests=error -j $(JOBS)

.PHONY: all build setup demo test test-fast test-asan install python clean bench fuzz

all: build

$(BUILD)/CMakeCache.txt:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: $(BUILD)/CMakeCache.txt
	$(CMAKE) --build $(BUILD) -j $(JOBS)

setup:
	@scripts/setup.sh

python: build
	@scripts/install-python.sh $(BUILD)

demo: setup
	@$(MAKE) --no-print-directory python
	@scripts/demo.sh $(BUILD)

# The sanitizer build runs the C-level tests (unit + integration against its own daemons);
# the main build then runs everything and ends with ctest's summary line.
test: setup
	@$(MAKE) --no-print-directory python
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory test-fast

test-fast: build
	cd $(BUILD) && $(CTEST) $(CTEST_ARGS)

$(ASAN_BUILD)/CMakeCache.txt:
	$(CMAKE) -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON

test-asan: $(ASAN_BUILD)/CMakeCache.txt
	$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && $(CTEST) $(CTEST_ARGS) -L '^c$$'

install: build
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

bench: build
	@echo "benchmarks are in $(BUILD)/bench; see bench/README.md"

# libFuzzer targets (clang) in build-fuzz/; e.g. build-fuzz/tests/fuzz/fuzz_parse tests/fuzz/corpus/parse,
# build-fuzz/tests/fuzz/fuzz_bytecode tests/fuzz/corpus/bytecode
fuzz:
	$(CMAKE) -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DLOOM_FUZZ=ON
	$(CMAKE) --build build-fuzz -j $(JOBS) --target fuzz_parse fuzz_bytecode fuzz_npy

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
