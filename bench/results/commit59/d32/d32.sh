#!/bin/bash
# Issue 59's decode at 32K by attention kind (Hosts table): share of the bandwidth bound, R rounds.
B=${B:-/work/main/build/subq}
for r in $(seq 1 ${R:-3}); do
  $B bench -m /tmp/qwen3-0.6b-q8_0.gguf -t 2 --prefill 0 --random-search 128 --topk 128 --search-f16 -n 16 --kv f16 \
    --ctx 32768 --attn full,exact,hnsw --json 2>/dev/null > d32_$r.json
  /usr/bin/python3 -c "
import json; d=json.load(open('d32_$r.json'))
print('$r', '  '.join('%s %.2f tok/s (%.2f of bound, probe %.1f GB/s)' % (x['attn'], x['decode_tok_s'], x['frac_bound'], x['read_bw_gbs']) for x in d['decode']))"
done
