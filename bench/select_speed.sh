#!/usr/bin/env bash
# Selection at the memory-bandwidth limit (issues 13 and 16): per layer-query
# time, bytes read and recall@K vs the f32 scan of each scan and index on
# synthetic keys (bench_select), then sparse decode of a random-weight
# Qwen3-0.6B Q8_0 (K 128, sink 4, tail 16, d_search 128 on layers 2..25,
# search keys f16, 2 threads) with the exact scan over f16 keys, int8 and
# int4 codes, HNSW, and with the four dense layers served by a K = 2048 exact
# selection instead (--topk-layers). Idle machine; about 40 minutes.
# Usage: bench/select_speed.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
tmp=${TMPDIR:-/tmp}
mkdir -p "$out"
model="$tmp/subq-qwen3-0.6b-q8_0.gguf"
[ -f "$model" ] || ./build/subq synth --shape qwen3-0.6b --type q8_0 -o "$model"
cmake --build build --target bench_select >/dev/null
./build/bench_select -n 32768,131072 -d 128 -k 128 -q 200 -t 2 -l 8 | tee "$out/select_synthetic.txt"
common=(-m "$model" -t 2 --kv f16 --prefill 0 --ctx 32768,131072 --random-search 128 --topk 128 --search-f16 -n 8 --json)
for scan in full int8 int4; do
  ./build/subq bench "${common[@]}" --attn exact --scan "$scan" > "$out/select_exact_$scan.json"
done
./build/subq bench "${common[@]}" --attn full,hnsw > "$out/select_full_hnsw.json"
./build/subq bench "${common[@]}" --attn exact --scan int8 --topk-layers 0-1:2048,-2--1:2048 \
  > "$out/select_exact_int8_topk_layers.json"
grep -h '"decode_tok_s"' "$out"/select_*.json || true
