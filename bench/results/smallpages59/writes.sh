#!/bin/bash
# Disk writes (MB a second, /sys/block/$DEV/stat) while NEW and OLD decode 128 tokens at 128K through --kv-file.
# The first seconds are the fill and its sync; the decode is the steady run before the end.
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; F=${F:-/tmp/kv128k.kv}; DEV=${DEV:-vda}
C="-m /tmp/qwen3-0.6b-q8_0.gguf --ctx 131072 --attn exact --random-search 64 --sparse-layers 2-25 --topk 128"
C="$C --search-f16 --kv q8_0 -n 128 --prefill 0 -c 131200 -t 2 --json"
for v in new old; do
  rm -f $F; B=$NEW; [ $v = old ] && B=$OLD
  $B bench $C --kv-file $F > writes_$v.json 2>/dev/null & P=$!
  prev=$(awk '{print $7}' /sys/block/$DEV/stat); line="$v MB/s:"
  while kill -0 $P 2>/dev/null; do sleep 1; s=$(awk '{print $7}' /sys/block/$DEV/stat)
    line="$line $(( (s - prev) * 512 / 1000000 ))"; prev=$s; done
  echo "$line"; echo "$v $(/usr/bin/python3 -c "import json; print(round(json.load(open('writes_$v.json'))['decode'][0]['decode_tok_s'],2))") tok/s"
done; rm -f $F
