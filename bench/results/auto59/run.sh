#!/bin/bash
# decode by context: new default (auto), new --scan full, new --scan int4, the binary before (48e7e20, default full)
# fixture, all layers sparse, random 64-wide search keys (f32, or f16 with F16=1), q8_0 KV, 2 threads
NEW=/work/main/build/subq; OLD=/tmp/oldwt/build/subq; M=/work/shared/models/fixture-4k-29m-q8_0.gguf
D=${1:-/tmp/auto}; R=${R:-3}; F=""; [ -n "$F16" ] && F="--search-f16"; tag=${F16:+f16_}
for r in $(seq 1 $R); do
 for ctx in 8192 16384 32768 65536 131072; do
  for v in auto full int4 before; do
   case $v in auto) B=$NEW; S="";; full) B=$NEW; S="--scan full";; int4) B=$NEW; S="--scan int4";; before) B=$OLD; S="";; esac
   o=$D/${tag}${v}_${ctx}_$r.json
   $B bench -m $M --ctx $ctx --attn exact $S --random-search 64 --sparse-layers all $F --kv q8_0 -n 128 --prefill 0 -c $((ctx+160)) -t 2 --json > $o 2>/dev/null
   /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['decode'][0]; print('$r $ctx ${tag}$v', round(d['decode_tok_s'],1), 'select', round(d['select_ms'],3))" >> $D/log
  done
 done
done
