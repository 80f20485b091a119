#!/bin/bash
M=/work/shared/models/fixture-4k-29m-q8_0.gguf; D=/tmp/h1m; ctx=1048576; c=$((ctx+64))
for b in subq-base subq-h1m; do
  uptime >> $D/log; s=$(date +%s); tag=hnsw_${b}_$(date +%H%M)
  /tmp/$b bench -m $M --ctx $ctx --attn hnsw --random-search 64 --sparse-layers all --search-f16 --kv q8_0 -n 32 --prefill 0 -c $c -t 2 --json > $D/$tag.json 2> $D/$tag.err
  python3 -c "
import json
d=json.load(open('$D/$tag.json'))['decode'][0]; print('$ctx hnsw $b', d['decode_tok_s'], 'attn', round(d['attn_ms'],2), 'select', round(d['select_ms'],2), 'insert', round(d['insert_ms'],2), 'fill', round(d['fill_s'],1), 'bound', round(d['frac_bound'],2))" >> $D/log 2>&1 || echo "$ctx $b failed" >> $D/log
  echo "   $(( $(date +%s)-s )) s" >> $D/log
done
