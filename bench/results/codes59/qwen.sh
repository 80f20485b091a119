#!/bin/bash
# Qwen3-0.6B shape at 32K, issue 59's decode-by-part command (default scan): NEW against OLD alternated, R rounds
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; D=${1:-qwen}; mkdir -p $D
for r in $(seq 1 ${R:-5}); do for v in old new; do
  B=$NEW; [ $v = old ] && B=$OLD
  o=$D/${v}_$r.json
  $B bench -m /tmp/qwen3-0.6b-q8_0.gguf -t 2 --prefill 0 --random-search 128 --topk 128 --search-f16 -n 64 --kv f16 \
    --ctx 32768 --attn exact --json > $o 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r $v', round(d['decode_tok_s'],2), 'tok/s select', round(d['select_ms'],2), 'attn', round(d['attn_ms'],2), 'bound', round(d.get('frac_bound',-1),3), 'bw', round(d['read_bw_gbs'],1))" | tee -a $D/log
done; done
