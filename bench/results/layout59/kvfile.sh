#!/bin/bash
# --kv-file at 128K against the in-memory cache (BENCHMARKS "Layers that read every row, through the file"), this
# binary, R alternated pairs: sparse layers are slot-major in both now.
B=${B:-/work/main/build/subq}; F=${F:-/tmp/kv128k.kv}
C="-m /tmp/qwen3-0.6b-q8_0.gguf --ctx 131072 --attn exact --random-search 64 --sparse-layers 2-25 --topk 128"
C="$C --search-f16 --kv q8_0 -n 32 --prefill 0 -c 131200 -t 2 --json"
for r in $(seq ${R0:-1} ${R:-2}); do for v in mem file; do
  rm -f $F; X=""; [ $v = file ] && X="--kv-file $F"
  $B bench $C $X 2>/dev/null > kv_${v}_$r.json
  /usr/bin/python3 -c "
import json; d=json.load(open('kv_${v}_$r.json'))['decode'][0]
print('$r $v', round(d['decode_tok_s'],2), 'tok/s attn', round(d['attn_ms'],1), 'ms')"
done; done; rm -f $F
