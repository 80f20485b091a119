#!/bin/bash
# all seven sparse layers (the projections' default), clusters defaults; THREADS= threads (2)
cd /tmp/far2
B=${B:-/work/main/build/subq}
M=/work/shared/models/fixture-4k-29m-q8_0.gguf
S=/work/main/tests/models/fixture-4k-search-rope.gguf
T=/work/shared/data/text/wikitext-2-raw.test.txt
L=${L:-131072}
P="bench -m $M --prefill-ctx $L --attn exact --search $S --search-f16 --kv q8_0 --tail 1024 --far-from 1024 --far-pos window -n ${ND:-1} -t ${THREADS:-2} --json"
for name in "$@"; do
  /usr/bin/time -v $B $P --prefill-text $T --probe-check ${CHECK:-64} $EXTRA > $name.json 2> $name.err
  grep -o '"seconds": [0-9.]*\|"attn_s": [0-9.]*\|"select_s": [0-9.]*\|"insert_s": [0-9.]*\|"other_s": [0-9.]*\|"check_recall": [0-9.]*\|"decode_tok_s": [0-9.]*' $name.json | tr '\n' ' '; echo " $name"
done
