#!/bin/bash
# Qwen3-0.6B shape at 32K, issue 59's decode-by-part command: auto (new default) vs --scan full vs the binary before
NEW=/work/main/build/subq; OLD=/tmp/oldwt/build/subq; D=${1:-/tmp/auto}; R=${R:-2}; CTX=${CTX:-32768}
for r in $(seq 1 $R); do for v in auto full before; do
  case $v in auto) B=$NEW; S="";; full) B=$NEW; S="--scan full";; before) B=$OLD; S="";; esac
  o=$D/qwen_${v}_${CTX}_$r.json
  $B bench -m /tmp/qwen3-0.6b-q8_0.gguf -t 2 --prefill 0 --random-search 128 --topk 128 --search-f16 -n 32 --kv f16 \
    --ctx $CTX --attn exact $S --json > $o 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r $CTX qwen $v', round(d['decode_tok_s'],2), 'select', round(d['select_ms'],2), 'attn', round(d['attn_ms'],2), 'bound', round(d.get('frac_bound',-1),2))" >> $D/qlog
done; done
