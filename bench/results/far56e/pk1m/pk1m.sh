#!/bin/bash
# one 1M-token pass-key prompt (depth 0.25), as bench/far_evidence.sh recall1m asks at 0.5
cd /tmp/far2/pk1m
/usr/bin/time -v ${B:-build/subq} recall -m /work/shared/models/fixture-4k-29m-q8_0.gguf --haystack /work/shared/data/text/wikitext-2-raw.test.txt --search /work/main/tests/models/fixture-4k-search-rope.gguf --lengths 1048576 --depths 0.25 --trials 1 --methods exact@64:window --sparse-prefill --tail 1024 --far-from 1024 -t 2 --kv q8_0 --search-f16 --scan int4 --kv-file /tmp/far2/pk1m/r.kv --json --svg-dir /tmp/far2/pk1m/svg --force -v > recall_1m_d025.json 2> recall_1m_d025.err
rm -f /tmp/far2/pk1m/r.kv
