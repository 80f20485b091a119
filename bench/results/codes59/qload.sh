#!/bin/bash
# beside two busy threads (--contend 2): the Qwen3-0.6B shape at 32K (issue 59's decode-by-part command, default scan):
# NEW -t 2, NEW -t 1, OLD -t 2, R rounds alternated
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; D=${1:-qload}; mkdir -p $D
for r in $(seq 1 ${R:-3}); do for v in new2 new1 old2; do
  case $v in new2) B=$NEW; t=2;; new1) B=$NEW; t=1;; old2) B=$OLD; t=2;; esac
  o=$D/${v}_$r.json
  $B bench -m /tmp/qwen3-0.6b-q8_0.gguf -t $t --contend 2 --prefill 0 --random-search 128 --topk 128 --search-f16 -n 32 \
    --kv f16 --ctx 32768 --attn exact --json > $o 2>/dev/null
  /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r $v', round(d['decode_tok_s'],2), 'tok/s select', round(d['select_ms'],2))" | tee -a $D/log
done; done
