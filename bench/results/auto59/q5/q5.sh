#!/bin/bash
# Qwen 32K: auto with codes split from 4 MiB (split4, this commit) against the full scan and auto splitting from 2 MiB
D=/tmp/auto/q5; mkdir -p $D
for r in 1 2 3 4; do for v in split4 full auto; do
  B=/tmp/auto/subq_$v; S=""; [ $v = full ] && B=/tmp/auto/subq_split4 && S="--scan full"
  o=$D/qwen_${v}_$r.json
  $B bench -m /tmp/qwen3-0.6b-q8_0.gguf -t 2 --prefill 0 --random-search 128 --topk 128 --search-f16 -n 64 --kv f16 --ctx 32768 --attn exact $S --json > $o 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r $v', round(d['decode_tok_s'],2), 'select', round(d['select_ms'],2), 'bound', round(d['frac_bound'],2))" >> $D/log
done; done
