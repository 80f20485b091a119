#!/usr/bin/env bash
# Decode against its bandwidth bound at long context (issue 13): random-weight
# Qwen3-0.6B Q8_0, 2 threads, random d_search = 128 projections on layers
# 2..25, K = 128, sink 4, tail 16, search keys f16, synthetic KV fill; every
# row carries its bound and frac_bound against the read bandwidth measured
# right before and after it. Then llama.cpp's dense decode at 32K after its
# real prefill, beside subq's decode rows at 32K (node-llama-cpp; once:
# npm --prefix bench install).
# Usage: bench/decode_bound.sh [OUTDIR] [MODEL]   (idle machine; ~35 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
tmp=${TMPDIR:-/tmp}
model=${2:-$tmp/subq-qwen3-0.6b-q8_0.gguf}
mkdir -p "$out"
[ -f "$model" ] || ./build/subq synth --shape qwen3-0.6b --type q8_0 -o "$model"
C=(-m "$model" -t 2 --prefill 0 --random-search 128 --topk 128 --search-f16 -n 8 --json)
run() { local name=$1; shift; uptime; echo "subq bench ${C[*]} $*"; ./build/subq bench "${C[@]}" "$@" > "$out/$name.json"; }
run bound_f16 --kv f16 --ctx 32768,131072 --attn full,exact
run bound_q8kv --kv q8_0 --ctx 32768,131072 --attn full,exact
run bound_topkl --kv f16 --ctx 32768,131072 --attn exact --topk-layers 0-1:2048,-2--1:2048
run bound_hnsw --kv f16 --ctx 32768,131072 --attn hnsw
uptime
node bench/peer_llamacpp.mjs --model "$model" --threads 2 --lengths 32768 -n 8 --subq-decode full,exact \
  --json "$out/peer_decode_32k.json"
grep -h '"decode_tok_s"' "$out"/bound_*.json | sed 's/, "attn_ms.*frac_bound/ ... frac_bound/'
