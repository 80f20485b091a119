#!/bin/bash
# --kv-file --kv-cold at 128K (page cache dropped before the timed steps): NEW and OLD alternated, R rounds
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; F=${F:-/tmp/kv128k.kv}
C="-m /tmp/qwen3-0.6b-q8_0.gguf --ctx 131072 --attn exact --random-search 64 --sparse-layers 2-25 --topk 128"
C="$C --search-f16 --kv q8_0 -n ${N:-32} --prefill 0 -c 131200 -t 2 --json --kv-cold"
for r in $(seq ${R0:-1} ${R:-2}); do for v in new old; do
  rm -f $F; B=$NEW; [ $v = old ] && B=$OLD
  $B bench $C --kv-file $F 2>/dev/null > cold_${v}_$r.json
  /usr/bin/python3 -c "
import json; d=json.load(open('cold_${v}_$r.json'))['decode'][0]
print('$r cold $v', round(d['decode_tok_s'],2), 'tok/s attn', round(d['attn_ms'],1), 'sel', round(d['select_ms'],1))"
done; done; rm -f $F
