#!/bin/bash
# one 32K window of WikiText-2 test, far scheme, f32 search keys (the default): auto (token by token) vs full (batched)
for v in auto full; do
 S=""; [ $v = full ] && S="--scan full"
 /usr/bin/time -f "%e s" /work/main/build/subq eval -m /work/shared/models/fixture-4k-29m-q8_0.gguf --eval-file /work/shared/data/text/wikitext-2-raw.test.txt -c 32768 \
  --windows 1 --search /work/main/tests/models/fixture-4k-search-rope.gguf --selectors exact --k-sweep 64 --static-split 0 \
  --kv f16 -t 2 --far-pos group --tail 1024 --far-from 1024 $S --json > eval32k_$v.json 2> eval32k_$v.err
done
