# subq top-level entry points. Quickstart: `make demo`, `make test`.
SHARED ?= $(abspath ../shared)
MODEL  ?= $(SHARED)/models/stories260K.gguf
JOBS   ?= $(shell nproc)
FUZZ_SECONDS ?= 60

.PHONY: all deps deps-test build build-san build-fuzz test check demo fuzz clean install

all: build

# Build dependencies only (make demo needs nothing more); the tests' too.
deps:
	@bash scripts/install-deps.sh

deps-test:
	@bash scripts/install-deps.sh --test

# make test builds with -Werror (WERROR=ON); a plain build does not, so that
# another compiler's new warning cannot stop `make demo`.
WERROR ?= OFF
test: WERROR = ON

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSUBQ_WERROR=$(WERROR) -DSUBQ_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build build -j $(JOBS)

# The libraries (libsubq, libsubq_lab: static and shared), headers,
# pkg-config files, the CLI and the Python package under PREFIX.
PREFIX ?= /usr/local
install: build
	@cmake --install build --prefix $(PREFIX)

# Unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
build-san: deps-test
	@cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DSUBQ_SANITIZE=ON -DSUBQ_WERROR=ON -DSUBQ_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build build-san -j $(JOBS)

test: deps-test build build-san build-fuzz
	@echo "== unit tests under ASan+UBSan =="
	@cd build-san && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit -j $(JOBS)
	@echo "== every fuzz target over its seed corpus =="
	@for f in $(FUZZERS); do \
	  SUBQ_SHARED=$(SHARED) SUBQ_TMP=$(abspath build-fuzz) ./build-fuzz/$$f -runs=0 tests/fuzz/corpus/$$f \
	    > build-fuzz/$$f.log 2>&1 || { tail -30 build-fuzz/$$f.log; echo "FAIL: $$f on its seed corpus"; exit 1; }; \
	done
	@echo "== all tests (release build) =="
	@cd build && ctest --output-on-failure -j $(JOBS)

# The fast loop while working: the release build's unit tests alone (about
# 30 s on two cores); `make test` runs everything, under the sanitizers too.
check: build
	@cd build && ctest --output-on-failure -L unit -j $(JOBS)

demo: build
	@./build/subq generate -m $(MODEL) -p "Once upon a time" -n 200 --temp 0.8 -s 42

# Every libFuzzer target in tests/fuzz/ for FUZZ_SECONDS each, from its seed
# corpus tests/fuzz/corpus/NAME (read-only; new inputs go to build-fuzz/corpus/NAME).
FUZZERS := $(sort $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.c))))
build-fuzz: deps-test
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DSUBQ_FUZZ=ON -DSUBQ_WERROR=ON -DSUBQ_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $(FUZZERS)

fuzz: build-fuzz
	@for f in $(FUZZERS); do \
	  echo "== $$f: $(FUZZ_SECONDS) s =="; \
	  mkdir -p build-fuzz/corpus/$$f tests/fuzz/corpus/$$f; \
	  SUBQ_SHARED=$(SHARED) SUBQ_TMP=$(abspath build-fuzz) ./build-fuzz/$$f -max_total_time=$(FUZZ_SECONDS) \
	    -timeout=30 -artifact_prefix=build-fuzz/ -print_final_stats=1 build-fuzz/corpus/$$f tests/fuzz/corpus/$$f || exit 1; \
	done

clean:
	rm -rf build build-san build-fuzz
