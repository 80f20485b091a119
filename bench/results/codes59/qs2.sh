#!/bin/bash
# Qwen shape 32K decode, two binaries alternated
for r in $(seq 1 ${R:-5}); do for v in A B; do
  B=$1; [ $v = B ] && B=$2
  $B bench -m /tmp/qwen3-0.6b-q8_0.gguf -t 2 --prefill 0 --random-search 128 --topk 128 --search-f16 -n 64 --kv f16 \
    --ctx 32768 --attn exact --json 2>/dev/null > /tmp/codes59/qs.json
  /usr/bin/python3 -c "
import json
d=json.load(open('/tmp/codes59/qs.json'))['decode'][0]; print('$v', round(d['decode_tok_s'],2), round(d['select_ms'],2), round(d.get('frac_bound',-1),3))"
done; done | tee /tmp/codes59/qs2.log | /usr/bin/python3 -c "
import sys,statistics as st
d={}
for line in sys.stdin:
    v,t,s,b=line.split(); d.setdefault(v,[]).append((float(t),float(s),float(b)))
for v in ('A','B'):
    t=[a for a,_,_ in d[v]]; s=[x for _,x,_ in d[v]]; b=[x for _,_,x in d[v]]
    print(v, 'tok/s med', st.median(t), min(t), max(t), '| select med', st.median(s), min(s), max(s), '| bound', min(b), max(b))"
