#!/bin/bash
# exact scans (full, int8, int4) against HNSW by context, the 4K fixture, every layer sparse, q8_0 KV, in memory
# Usage: bench/hnsw_crossover.sh OUTDIR   (SUBQ: the binary, SHARED: ../shared); the 512K HNSW fill takes minutes
B=${SUBQ:-./build/subq}
M=${SHARED:-../shared}/models/fixture-4k-29m-q8_0.gguf
D=${1:?usage: bench/hnsw_crossover.sh OUTDIR}; mkdir -p "$D"
for ctx in 32768 131072 524288; do
  c=$((ctx + 64))
  for v in full int8 int4 hnsw; do
    if [ $v = hnsw ]; then A="--attn hnsw"; else A="--attn exact --scan $v"; fi
    s=$(date +%s)
    $B bench -m $M --ctx $ctx $A --random-search 64 --sparse-layers all --search-f16 --kv q8_0 -n 32 --prefill 0 -c $c -t 2 --json > $D/${v}_$ctx.json 2> $D/${v}_$ctx.err
    python3 -c "
import json
d=json.load(open('$D/${v}_$ctx.json'))['decode'][0]; print('$ctx $v', d['decode_tok_s'], 'attn', round(d['attn_ms'],2), 'select', round(d['select_ms'],2), 'insert', round(d['insert_ms'],2), 'fill', round(d['fill_s'],1), 'bound', round(d['frac_bound'],2))" >> $D/log 2>&1 || echo "$ctx $v failed" >> $D/log
    echo "   $(( $(date +%s)-s )) s" >> $D/log
  done
done
