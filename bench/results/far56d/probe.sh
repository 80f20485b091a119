#!/bin/bash
cd /tmp/far
B=${B:-/work/main/build/subq}
M=/work/shared/models/fixture-4k-29m-q8_0.gguf
S=/work/main/tests/models/fixture-4k-search-rope.gguf
L=${L:-131072}
P="bench -m $M --prefill-ctx $L --attn exact --search $S --sparse-layers 3,6 --search-f16 --kv q8_0 --tail 1024 --far-from 1024 --far-pos window -n 1 -t 2 --json"
for spec in "$@"; do
  name=${spec%%=*}; txt=${spec#*=}
  /usr/bin/time -v $B $P --prefill-text $txt --probe-check ${CHECK:-64} $EXTRA > $name.json 2> $name.err
  grep -o '"seconds": [0-9.]*\|"select_s": [0-9.]*\|"check_recall": [0-9.]*' $name.json | tr '\n' ' '; echo " $name"
done
