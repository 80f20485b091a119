#!/bin/bash
# codes split from 8 MiB (split8) against 2 MiB (auto): Qwen 32K (2.2 MB of codes a layer) and the fixture at 128K
# (f32 keys, 5.2 MB of codes), alternated, 4 rounds
D=/tmp/auto/q4; mkdir -p $D
for r in 1 2 3 4; do for v in split8 auto; do
  B=/tmp/auto/subq_$v
  o=$D/qwen_${v}_$r.json
  $B bench -m /tmp/qwen3-0.6b-q8_0.gguf -t 2 --prefill 0 --random-search 128 --topk 128 --search-f16 -n 64 --kv f16 --ctx 32768 --attn exact --json > $o 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r qwen $v', round(d['decode_tok_s'],2), 'select', round(d['select_ms'],2))" >> $D/log
  o=$D/fix_${v}_$r.json
  $B bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --ctx 131072 --attn exact --random-search 64 --sparse-layers all --kv q8_0 -n 256 --prefill 0 -c 131328 -t 2 --json > $o 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r fix128k $v', round(d['decode_tok_s'],1), 'select', round(d['select_ms'],3))" >> $D/log
done; done
