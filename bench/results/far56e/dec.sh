#!/bin/bash
# decode at 128K, new and old alternated; far keys off and on
cd /tmp/far2
M=/work/shared/models/fixture-4k-29m-q8_0.gguf
S=/work/main/tests/models/fixture-4k-search-rope.gguf
P="bench -m $M --ctx 131072 --attn exact --search $S --kv q8_0 --prefill 0 -n 64 -t 2 --json"
for i in ${ROUNDS:-1 2 3}; do
  for b in ${ORDER:-new old}; do
    for far in off on; do
      F=""; [ $far = on ] && F="--tail 1024 --far-from 1024 --far-pos window"
      ./subq_$b $P $F > dec_${b}_${far}_$i.json 2> dec_${b}_${far}_$i.err
      echo "$b $far $i $(grep -o '"tok_s": [0-9.]*' dec_${b}_${far}_$i.json | tr '\n' ' ')"
    done
  done
done
