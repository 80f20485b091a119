#!/usr/bin/env bash
# Decode GEMV speed (issue 13): the integer GEMV (matmul, one token) against
# the float row dot products it replaced (dot_rows) and the read bandwidth,
# on the Qwen3-0.6B matrix shapes (rows x cols) with 1 and 2 threads, in one
# process per shape; then, given an older subq binary, decode tok/s of both
# binaries on the same model, interleaved, best of PASSES.
# Usage: bench/gemv_speed.sh [MODEL [OLD_SUBQ [PASSES]]]   (run on an otherwise idle machine)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-}
old=${2:-}
passes=${3:-3}
cmake --build build --target bench_gemv >/dev/null
uptime
for t in 1 2; do
  for shape in 2048x1024 1024x2048 1024x1024 3072x1024 1024x3072 151936x1024; do
    ./build/bench_gemv -t "$t" -r "${shape%x*}" -c "${shape#*x}" -p 5 --type q8_0
  done
done
uptime
[ -n "$model" ] || exit 0
for p in $(seq "$passes"); do
  for bin in ${old:+"$old"} ./build/subq; do
    printf '%-40s ' "$bin"
    "$bin" bench -m "$model" -t 2 --prefill 0 --kv f16 --ctx 512 --attn full -n 32 2>/dev/null | grep -E 'read bandwidth|^ +512 full' | tr -s ' ' | tr '\n' ' '
    echo
  done
done
uptime
