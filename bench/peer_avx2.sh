#!/bin/bash
# subq and llama.cpp both at the AVX2 level, side by side (issue 31: ">= 1.0x
# llama.cpp on every ISA level you can reach"): subq through SUBQ_ISA=avx2,
# llama.cpp by hiding its prebuilt CPU variants above AVX2 (the AVX-512 and
# AVX-VNNI ones) from its backend loader for the run, so that it loads
# libggml-cpu-haswell.so; they are put back on exit.
#   bench/peer_avx2.sh [peer_llamacpp.mjs options, e.g. --model F --threads 2 --lengths 512]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bins="$here/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
[ -d "$bins" ] || { echo "peer_avx2.sh: $bins missing (npm --prefix bench install)" >&2; exit 1; }
hidden=$(mktemp -d)
restore() { mv "$hidden"/*.so "$bins"/ 2>/dev/null || true; rmdir "$hidden"; }
trap restore EXIT
for v in zen4 cannonlake cascadelake skylakex icelake sapphirerapids cooperlake alderlake; do
    [ -f "$bins/libggml-cpu-$v.so" ] && mv "$bins/libggml-cpu-$v.so" "$hidden/"
done
echo "llama.cpp CPU variants left: $(cd "$bins" && ls libggml-cpu-*.so | tr '\n' ' ')"
SUBQ_ISA=avx2 node "$here/peer_llamacpp.mjs" "$@"
