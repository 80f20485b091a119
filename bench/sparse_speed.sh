#!/usr/bin/env bash
# Sparse decode speed (issue 5): random-weight Qwen3-0.6B Q8_0, random
# d_search=128 projections on layers 2..25, K=128, 2 threads; full vs exact
# vs hnsw decode at 4K, 32K and 128K contexts (KV cache f16 so 128K fits in
# 24 GiB; caches and indexes are filled synthetically, see subq bench --help).
# Usage: bench/sparse_speed.sh [OUTDIR]   (idle machine; takes ~20 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
tmp=${TMPDIR:-/tmp}
mkdir -p "$out"
model="$tmp/subq-qwen3-0.6b-q8_0.gguf"
[ -f "$model" ] || ./build/subq synth --shape qwen3-0.6b --type q8_0 -o "$model"
./build/subq bench -m "$model" -t 2 --kv f16 --prefill 0 --attn full,exact,hnsw --ctx 4096,32768,131072 \
  --random-search 128 --topk 128 --search-f16 -n 8 --json > "$out/sparse_qwen3-0.6b.json"
cat "$out/sparse_qwen3-0.6b.json"
