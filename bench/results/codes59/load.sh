#!/bin/bash
# beside two busy threads (--contend 2): the fixture at CTX, all layers sparse, random 64-wide f32 keys, default scan;
# NEW -t 2, NEW -t 1, OLD -t 2, R rounds alternated
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; D=${1:-load}; ctx=${CTX:-65536}; mkdir -p $D
M=/work/shared/models/fixture-4k-29m-q8_0.gguf
for r in $(seq 1 ${R:-3}); do for v in new2 new1 old2; do
  case $v in new2) B=$NEW; t=2;; new1) B=$NEW; t=1;; old2) B=$OLD; t=2;; esac
  o=$D/${v}_${ctx}_$r.json
  $B bench -m $M --ctx $ctx --attn exact --random-search 64 --sparse-layers all --kv q8_0 -n 128 --prefill 0 \
    -c $((ctx+160)) -t $t --contend 2 --json > $o 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r $ctx $v', round(d['decode_tok_s'],1), 'tok/s select', round(d['select_ms'],3))" | tee -a $D/log
done; done
