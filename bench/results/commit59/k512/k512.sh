#!/bin/bash
# 512K tokens through --kv-file (35.7 GB, larger than the page cache can hold with the rest), every layer sparse,
# bench/kv_file.sh's command, warm: this binary (NEW) against 3e493c7 (OLD), alternated.
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; F=${F:-/tmp/kv512k.kv}
C="-m /tmp/qwen3-0.6b-q8_0.gguf --ctx 524288 --attn exact --random-search 64 --sparse-layers all --search-f16"
C="$C --scan int4 --kv q8_0 -n 16 --prefill 0 -c 524312 -t 2 --json"
for r in $(seq 1 ${R:-1}); do for v in new old; do
  rm -f $F; B=$NEW; [ $v = old ] && B=$OLD
  $B bench $C --kv-file $F 2>/dev/null > ${v}_$r.json
  /usr/bin/python3 -c "
import json; d=json.load(open('${v}_$r.json'))['decode'][0]
print('$r $v', round(d['decode_tok_s'],2), 'tok/s attn', round(d['attn_ms'],1), 'sel', round(d['select_ms'],1))"
done; done; rm -f $F
