#!/usr/bin/env bash
# Long-prompt prefill (issue 10): random-weight Qwen3-0.6B Q8_0, 2 threads,
# KV f16, batches of 512; a real prefill of 2K, 8K and 32K tokens (text of
# pride-and-prejudice, repeated) with full attention and the batched sparse
# prefill of exact and hnsw (random d_search=128 projections on layers 2..25,
# K=128), then 8 decode steps at each real context; prints tok/s, where the
# time went and the growth exponent a (time ~ N^a). The sparse rows alone
# (--attn exact,hnsw) take ~15 minutes on an idle machine; dense 32K ~1 hour.
# Usage: bench/prefill_speed.sh [OUTDIR] [ATTN]   (idle machine)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
attn=${2:-full,exact,hnsw}
tmp=${TMPDIR:-/tmp}
shared=${SUBQ_SHARED:-../shared}
mkdir -p "$out"
model="$tmp/subq-qwen3-0.6b-q8_0.gguf"
[ -f "$model" ] || ./build/subq synth --shape qwen3-0.6b --type q8_0 -o "$model"
uptime
./build/subq bench -m "$model" -t 2 --kv f16 -b 512 --prefill-ctx 2048,8192,32768 --attn "$attn" \
  --prefill-text "$shared/data/text/pride-and-prejudice.txt" --random-search 128 --topk 128 --search-f16 -n 8 \
  --json > "$out/prefill_qwen3-0.6b.json"
uptime
cat "$out/prefill_qwen3-0.6b.json"
