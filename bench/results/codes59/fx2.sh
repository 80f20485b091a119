#!/bin/bash
# fixture decode (all layers sparse, random 64-wide f32 keys), two binaries alternated at CTX
M=/work/shared/models/fixture-4k-29m-q8_0.gguf; ctx=${CTX:-32768}; A=$1; Bb=$2
for r in $(seq 1 ${R:-6}); do for v in A B; do
  B=$A; [ $v = B ] && B=$Bb
  $B bench -m $M --ctx $ctx --attn exact --random-search 64 --sparse-layers all --kv q8_0 -n 128 --prefill 0 -c $((ctx+160)) -t 2 ${EXTRA} --json > /tmp/codes59/fx.json 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('/tmp/codes59/fx.json'))['decode'][0]; print('$v', round(d['decode_tok_s'],1), round(d['select_ms'],3))"
done; done | /usr/bin/python3 -c "
import sys,statistics as st
d={}
for line in sys.stdin:
    v,t,s=line.split(); d.setdefault(v,[]).append((float(t),float(s)))
for v in ('A','B'):
    t=[a for a,b in d[v]]; s=[b for a,b in d[v]]
    print('$ctx', v, 'tok/s median', st.median(t), 'range', min(t), max(t), 'select median', st.median(s), 'range', min(s), max(s))"
