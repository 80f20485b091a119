#!/bin/bash
# Slot-major sparse layers in memory: NEW against OLD alternated, R rounds, issue 59's decode command
# (Qwen3-0.6B shape, 24 sparse layers, f16 KV and search keys, K 128, exact scan) at CTX, T threads.
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; M=${M:-/tmp/qwen3-0.6b-q8_0.gguf}
for r in $(seq 1 ${R:-4}); do for v in old new; do
  B=$NEW; [ $v = old ] && B=$OLD
  $B bench -m $M -t ${T:-2} --prefill 0 --random-search 128 --topk 128 --search-f16 -n ${N:-64} --kv f16 \
    --ctx ${CTX:-32768} --attn ${ATTN:-exact} --json 2>/dev/null | /usr/bin/python3 -c "
import json,sys
d=json.load(sys.stdin)['decode'][0]
print('$r $v', round(d['decode_tok_s'],2), 'tok/s attn', round(d['attn_ms'],2), 'select', round(d['select_ms'],2),
      'share', round(d.get('frac_bound',-1),3), 'bw', round(d['read_bw_gbs'],1))"
done; done
