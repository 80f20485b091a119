#!/usr/bin/env bash
# Dense engine speed (issue 3): random-weight Qwen3-0.6B in Q8_0 and F16,
# 2 threads, prefill 512 and decode at contexts 512 and 4096, KV cache f16
# (llama-bench's default) and f32, with the machine's bandwidth and sgemm
# rate measured in the same run.
# Usage: bench/dense_speed.sh [OUTDIR]   (run on an otherwise idle machine)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
tmp=${TMPDIR:-/tmp}
mkdir -p "$out"
for type in q8_0 f16; do
  model="$tmp/subq-qwen3-0.6b-$type.gguf"
  [ -f "$model" ] || ./build/subq synth --shape qwen3-0.6b --type "$type" -o "$model"
  for kv in f16 f32; do
    ./build/subq bench -m "$model" -t 2 --ctx 512,4096 --kv $kv --json > "$out/dense_qwen3-0.6b_${type}_kv$kv.json"
    cat "$out/dense_qwen3-0.6b_${type}_kv$kv.json"
  done
done
