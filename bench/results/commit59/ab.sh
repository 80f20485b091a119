#!/bin/bash
# --kv-file at 128K against the in-memory cache, this binary (NEW) and the one before (OLD) through the file,
# R alternated rounds of mem / file (new) / file (old); disk writes during each run from /sys/block/$DEV/stat.
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; F=${F:-/tmp/kv128k.kv}; DEV=${DEV:-vda}
C="-m /tmp/qwen3-0.6b-q8_0.gguf --ctx 131072 --attn exact --random-search 64 --sparse-layers 2-25 --topk 128"
C="$C --search-f16 --kv q8_0 -n ${N:-64} --prefill 0 -c 131200 -t 2 --json"
for r in $(seq ${R0:-1} ${R:-3}); do for v in mem new old; do
  rm -f $F; B=$NEW; X="--kv-file $F"; [ $v = mem ] && X=""; [ $v = old ] && B=$OLD
  $B bench $C $X 2>/dev/null > ${v}_$r.json
  /usr/bin/python3 -c "
import json; d=json.load(open('${v}_$r.json'))['decode'][0]; s=1000/d['decode_tok_s']
print('$r $v', round(d['decode_tok_s'],2), 'tok/s attn', round(d['attn_ms'],1), 'sel', round(d['select_ms'],1),
      'rest', round(s-d['attn_ms']-d['select_ms']-d['insert_ms'],1))"
done; done; rm -f $F
