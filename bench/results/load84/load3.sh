B="bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --search /work/main/tests/models/fixture-4k-search-rope.gguf --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --topk 64 --search-f16 -n 256 --kv f16 --far-pos group --tail 1024 --far-from 1024 --json --prefill-ctx 32768 --attn exact --scan int4"
sh -c 'while :; do :; done' & L1=$!
sh -c 'while :; do :; done' & L2=$!
for r in a b; do
/tmp/subq-H1 $B -t 2 > l3_t2_$r.json 2>/dev/null
/tmp/subq-H1 $B -t 1 > l3_t1_$r.json 2>/dev/null
done
kill $L1 $L2
echo done > load3.done
