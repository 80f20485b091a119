B="bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --search /work/main/tests/models/fixture-4k-search-rope.gguf --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --topk 64 --search-f16 -n 256 --kv f16 --far-pos group --json"
for r in a b; do
/tmp/subq-H6 $B -t 2 --prefill-ctx 32768 --attn hnsw > i_def_H6_$r.json 2>/dev/null
/tmp/subq-H1 $B -t 2 --prefill-ctx 32768 --attn hnsw > i_def_H1_$r.json 2>/dev/null
/tmp/subq-H6 $B -t 2 --prefill-ctx 32768 --attn exact --scan int4 > i_def_H6int4_$r.json 2>/dev/null
done
/tmp/subq-H6 $B -t 2 --prefill-ctx 131072 --attn hnsw > i_128_H6.json 2>/dev/null
echo done > fin2.done
