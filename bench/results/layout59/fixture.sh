#!/bin/bash
# The 4K fixture, every layer sparse (so every layer slot-major now), exact K 64 over random 64-wide search keys,
# q8_0 KV, 2 threads, 128 steps: NEW against OLD alternated, R rounds, at 32K and 128K.
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; M=${SHARED:-/work/shared}/models/fixture-4k-29m-q8_0.gguf
for r in $(seq 1 ${R:-3}); do for ctx in 32768 131072; do for v in old new; do
  B=$NEW; [ $v = old ] && B=$OLD
  $B bench -m $M --ctx $ctx --attn exact --random-search 64 --sparse-layers all --kv q8_0 -n 128 --prefill 0 \
    -c $((ctx + 160)) -t 2 --json 2>/dev/null | /usr/bin/python3 -c "
import json,sys
d=json.load(sys.stdin)['decode'][0]
print('$r $ctx $v', round(d['decode_tok_s'],1), 'tok/s attn', round(d['attn_ms'],3), 'select', round(d['select_ms'],3))"
done; done; done
