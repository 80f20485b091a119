#!/usr/bin/env bash
# The headline speed tables of BENCHMARKS.md, on any machine:
#   1. the Qwen3-0.6B shape (random weights, subq synth), Q8_0, f16 KV, 2 threads:
#      prefill 512 and decode at 4K, quiet and beside two busy threads (--contend);
#   2. decode at 32K, full attention and exact selection (random 128-wide search
#      projections on layers 2-25, int4 scan, K 128);
#   3. train-search speed on the 4K fixture model (4 steps of 4096 tokens);
#   4. llama.cpp side by side, when bench/node_modules holds node-llama-cpp
#      (npm --prefix bench install).
# Usage: bench/run.sh OUT   (an otherwise idle machine; ~15 minutes on 2 cores)
# JSON into OUT, a summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/run.sh OUT}
mkdir -p "$out"
S=./build/subq
shared=${SHARED:-../shared}
model="$out/qwen3-0.6b-q8_0.gguf"
[ -f "$model" ] || $S synth --shape qwen3-0.6b --type q8_0 -o "$model"
$S bench -m "$model" -t 2 --ctx 4096 --prefill 512 -n 16 --contend 2 --json > "$out/contend.json"
$S bench -m "$model" -t 2 --ctx 32768 --prefill 0 -n 8 --attn full,exact --random-search 128 --topk 128 \
    --search-f16 --scan int4 --json > "$out/decode_32k.json"
fx="$shared/models/fixture-4k-29m-q8_0.gguf"
text="$shared/data/text/wikitext-103.valid.tokens.txt"
$S train-search -m "$fx" -f "$text" --seq 4096 --d-search 64 --steps 4 --warmup 1 --eval-every 0 \
    --eval-tokens 8192 -t 2 --force -o "$out/train_speed.gguf" 2> "$out/train_speed.log"
if [ -d bench/node_modules/node-llama-cpp ]; then
    node bench/peer_llamacpp.mjs --model "$model" --threads 2 --lengths 512 > "$out/peer_llamacpp.json"
fi
/usr/bin/python3 - "$out" <<'PY'
import json, os, re, sys
out = sys.argv[1]
c = json.load(open(os.path.join(out, "contend.json")))
q, b = c, c["contended"]
print("prefill 512: %.1f tok/s quiet, %.1f beside 2 busy threads (%.2fx)" %
      (q["prefill"]["tok_s"], b["prefill"]["tok_s"], q["prefill"]["tok_s"] / b["prefill"]["tok_s"]))
print("decode @4096: %.2f tok/s quiet, %.2f busy (%.2fx)" %
      (q["decode"][0]["decode_tok_s"], b["decode"][0]["decode_tok_s"], q["decode"][0]["decode_tok_s"] / b["decode"][0]["decode_tok_s"]))
d = json.load(open(os.path.join(out, "decode_32k.json")))
for r in d["decode"]:
    print("decode @%d %s: %.2f tok/s (%.2fx full), %.2f of its bandwidth bound" %
          (r["ctx"], r["attn"], r["decode_tok_s"], r["speedup_vs_full"], r["frac_bound"]))
log = open(os.path.join(out, "train_speed.log")).read()
m = re.findall(r"steps, (\d+) tok/s \(([\d.]+) GFLOP/s, (\d+)% of sgemm\)", log)
if m:
    print("train-search (fixture, 4096-token sequences): %s tok/s, %s GFLOP/s, %s%% of sgemm" % m[-1])
p = os.path.join(out, "peer_llamacpp.json")
if os.path.exists(p):
    print("llama.cpp side by side: " + open(p).read().strip()[:400])
PY
