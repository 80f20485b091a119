#!/bin/bash
# $1 name, $2 length, rest: extra flags
cd /tmp/far2; n=$1; L=$2; shift 2
/usr/bin/time -v ${B:-/tmp/far2/subq_new} bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --prefill-ctx $L --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --attn exact --search /work/main/tests/models/fixture-4k-search-rope.gguf --search-f16 --scan int4 --kv q8_0 --tail 1024 --far-from 1024 --far-pos window --probe-check 4096 -n 4 -t 2 --json "$@" > $n.json 2> $n.err
grep -o '"seconds": [0-9.]*\|"attn_s": [0-9.]*\|"select_s": [0-9.]*\|"insert_s": [0-9.]*\|"other_s": [0-9.]*\|"check_recall": [0-9.]*\|"decode_tok_s": [0-9.]*' $n.json | tr '\n' ' '; echo " $n $(grep -E 'Percent' $n.err)"
