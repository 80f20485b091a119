#!/bin/bash
# The exact scan by context (BENCHMARKS.md, "The scan by length"): --scan auto (the default), full and int4 on the 4K
# fixture, every layer sparse, random 64-wide search keys (f32; f16 with F16=1), q8_0 KV, 2 threads, 128 steps,
# contexts 8K-128K, ROUNDS rounds alternated; with OLD=binary, that binary's default beside them.
# Usage: bench/scan_by_length.sh OUTDIR   (SUBQ: the binary, SHARED: ../shared; about a minute a round)
B=${SUBQ:-./build/subq}
M=${SHARED:-../shared}/models/fixture-4k-29m-q8_0.gguf
D=${1:?usage: bench/scan_by_length.sh OUTDIR}; mkdir -p "$D"
F=""; [ -n "$F16" ] && F="--search-f16"; tag=${F16:+f16_}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for ctx in 8192 16384 32768 65536 131072; do
    for v in auto full int4 ${OLD:+before}; do
      bin=$B; S="--scan $v"; [ $v = before ] && bin=$OLD && S=""
      o=$D/${tag}${v}_${ctx}_$r.json
      $bin bench -m "$M" --ctx $ctx --attn exact $S --random-search 64 --sparse-layers all $F --kv q8_0 -n 128 \
        --prefill 0 -c $((ctx + 160)) -t 2 --json > "$o" 2> "${o%.json}.err"
      /usr/bin/python3 -c "
import json
d = json.load(open('$o'))['decode'][0]
print('$r $ctx ${tag}$v', round(d['decode_tok_s'], 1), 'tok/s, selection', round(d['select_ms'], 3), 'ms a step')" \
        >> "$D/log" 2>&1 || echo "$r $ctx ${tag}$v failed" >> "$D/log"
    done
  done
done
cat "$D/log"
