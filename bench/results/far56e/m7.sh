#!/bin/bash
cd /tmp/far2
/usr/bin/time -v ${B:-/tmp/far2/subq_new} bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --prefill-ctx 1048576 --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --attn exact --search /work/main/tests/models/fixture-4k-search-rope.gguf --search-f16 --scan int4 --kv q8_0 --tail 1024 --far-from 1024 --far-pos window --probe-check 4096 -n 4 -t 2 --kv-file /tmp/far2/m7.kv --json > m7_fix.json 2> m7_fix.err
rm -f /tmp/far2/m7.kv
