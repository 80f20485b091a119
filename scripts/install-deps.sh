#!/usr/bin/env bash
# Install subq's build and test dependencies from Debian bookworm packages.
# Does nothing when everything is already present; runs `apt-get update` first
# otherwise, because a fresh machine's package lists may be empty or stale.
set -euo pipefail

# Usage: install-deps.sh          what building subq needs (make build, make demo)
#        install-deps.sh --test   also what its tests need (make test): numpy,
#                                 curl, clang, Node with the test driver's npm packages
pkgs=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev # sgemm for prefill (OpenMP build: one thread pool with ours)
  libomp-dev             # OpenMP runtime for clang builds (gcc ships libgomp)
  libpcre2-dev           # Unicode-class pre-split regexes (byte-level BPE)
  libhnswlib-dev         # HNSW selector
  libfaiss-dev           # optional FAISS selector
  libmicrohttpd-dev      # HTTP server of subq serve
  libjansson-dev         # JSON of subq serve
  libopenmpi-dev openmpi-bin  # data-parallel train-search / train-phi under mpirun (optional to the build)
)
test_deps=0
[ "${1:-}" = --test ] && test_deps=1
if [ $test_deps = 1 ]; then
  pkgs+=(
    python3-numpy          # test oracles (run with /usr/bin/python3)
    python3-pytest         # the Python package's tests (python/tests)
    python3-torch          # the real writer and reader of PyTorch checkpoints (python/tests/test_convert.py)
    curl                   # subq serve tests
    clang libclang-rt-14-dev  # sanitizers and libFuzzer targets
  )
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Node drives the official openai client in the subq serve tests; any node
# with npm will do (Debian's, or one installed otherwise).
if [ $test_deps = 1 ] && { ! command -v node >/dev/null || ! command -v npm >/dev/null; }; then
  missing+=(nodejs npm)
fi

# The test drivers' npm packages, pinned by tests/node/package-lock.json:
# the openai client and node-llama-cpp with its linux-x64 CPU build alone
# (--omit=optional leaves out its GPU builds, 600 MB; `npm ci` refuses a
# lock that holds one platform's optional packages, so `npm install
# --no-save` installs the locked versions without rewriting the lock).
node_modules() {
  [ $test_deps = 1 ] || return 0
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/node"
  if [ ! -d "$dir/node_modules/openai" ] || [ ! -d "$dir/node_modules/node-llama-cpp" ]; then
    echo "install-deps: npm install in tests/node" >&2
    (cd "$dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --omit=optional --no-save --no-audit --no-fund \
       --loglevel=error)
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  node_modules
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
node_modules
