B="bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --search /work/main/tests/models/fixture-4k-search-rope.gguf --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --topk 64 --search-f16 -n 256 --kv f16 --far-pos group --tail 1024 --far-from 1024 --json --prefill-ctx 16384 --attn exact --scan int4"
sh -c 'while :; do :; done' & L1=$!
sh -c 'while :; do :; done' & L2=$!
for r in a b; do
/tmp/subq-H7 $B -t 2 > m_load_H7_t2_$r.json 2>/dev/null
/tmp/subq-H6 $B -t 2 > m_load_H6_t2_$r.json 2>/dev/null
/tmp/subq-H7 $B -t 1 > m_load_H7_t1_$r.json 2>/dev/null
done
kill $L1 $L2
for r in a b; do
/tmp/subq-H7 $B -t 2 > m_quiet_H7_$r.json 2>/dev/null
/tmp/subq-H6 $B -t 2 > m_quiet_H6_$r.json 2>/dev/null
done
echo done > solo.done
