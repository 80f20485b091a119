#!/bin/bash
# real prompts of WikiText-2 test past the 4K fixture's window, far scheme, trained rotated projections, f32 search keys
# (the default), K 64: new default (auto) vs --scan full vs the binary before (48e7e20, default full)
NEW=/work/main/build/subq; OLD=/tmp/oldwt/build/subq; D=${1:-/tmp/auto}; R=${R:-2}
for r in $(seq 1 $R); do
 for ctx in ${CTXS:-32768}; do
  for v in ${VARIANTS:-auto full before}; do
   case $v in auto) B=$NEW; S="";; full) B=$NEW; S="--scan full";; int4) B=$NEW; S="--scan int4";; before) B=$OLD; S="";; esac
   o=$D/real_${v}_${ctx}_$r.json
   $B bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --search /work/main/tests/models/fixture-4k-search-rope.gguf \
     --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --prefill-ctx $ctx --topk 64 -n 256 --kv f16 \
     --far-pos group --attn exact $S -t 2 --json > $o 2>/dev/null
   /usr/bin/python3 -c "
import json
d=json.load(open('$o'))['prefill'][0]; print('$r $ctx real $v', round(d['decode_tok_s'],1), 'select', round(d['decode_select_ms'],3), 'prefill_s', round(d['seconds'],1))" >> $D/log
  done
 done
done
