#!/bin/bash
# f16 keys at 8K (below auto's switch at 16K): auto and full run the same scan; alternated
B=/work/main/build/subq; M=/work/shared/models/fixture-4k-29m-q8_0.gguf; D=/tmp/auto
for r in 1 2 3 4; do for v in full auto; do
  S=""; [ $v = full ] && S="--scan full"
  o=$D/ab_${v}_$r.json
  $B bench -m $M --ctx 8192 --attn exact $S --random-search 64 --sparse-layers all --search-f16 --kv q8_0 -n 256 --prefill 0 -c 8448 -t 2 --json > $o 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r $v', round(d['decode_tok_s'],1), 'select', round(d['select_ms'],3), 'attn', round(d['attn_ms'],3))"
done; done
