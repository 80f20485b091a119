# subq top-level entry points. Quickstart: `make demo`, `make test`.
SHARED ?= $(abspath ../shared)
MODEL  ?= $(SHARED)/models/stories260K.gguf
JOBS   ?= $(shell nproc)
FUZZ_SECONDS ?= 60

.PHONY: all deps build build-san test test-unit demo fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSUBQ_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build build -j $(JOBS)

# Unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
build-san: deps
	@cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DSUBQ_SANITIZE=ON -DSUBQ_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build build-san -j $(JOBS)

test: build build-san
	@echo "== unit tests under ASan+UBSan =="
	@cd build-san && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit -j $(JOBS)
	@echo "== all tests (release build) =="
	@cd build && ctest --output-on-failure -j $(JOBS)

demo: build
	@./build/subq generate -m $(MODEL) -p "Once upon a time" -n 200 --temp 0.8 -s 42

fuzz: deps
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DSUBQ_FUZZ=ON -DSUBQ_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_gguf fuzz_hparams fuzz_tokenizer
	@mkdir -p build-fuzz/corpus-gguf build-fuzz/corpus-tok
	@cp $(MODEL) build-fuzz/corpus-gguf/ 2>/dev/null || true
	@SUBQ_SHARED=$(SHARED) ./build-fuzz/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build-fuzz/corpus-gguf
	@/usr/bin/python3 tests/fuzz/seed_hparams.py build-fuzz/corpus-hparams
	@./build-fuzz/fuzz_hparams -max_total_time=$(FUZZ_SECONDS) -max_len=4096 build-fuzz/corpus-hparams
	@SUBQ_SHARED=$(SHARED) ./build-fuzz/fuzz_tokenizer -max_total_time=$(FUZZ_SECONDS) build-fuzz/corpus-tok
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_serve_request fuzz_session
	@mkdir -p build-fuzz/corpus-request build-fuzz/corpus-session
	@echo '{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop":["x"],"seed":1,"subq":{"select":"window","topk":8}}' > build-fuzz/corpus-request/seed.json
	@[ ! -x build/subq ] || ./build/subq generate -m $(MODEL) -p "Once upon a time" -n 1 -c 128 --prompt-cache build-fuzz/corpus-session/seed.gguf >/dev/null 2>&1 || true
	@./build-fuzz/fuzz_serve_request -max_total_time=$(FUZZ_SECONDS) build-fuzz/corpus-request
	@SUBQ_SHARED=$(SHARED) ./build-fuzz/fuzz_session -max_total_time=$(FUZZ_SECONDS) -max_len=262144 build-fuzz/corpus-session

clean:
	rm -rf build build-san build-fuzz
