B="bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --search /work/main/tests/models/fixture-4k-search-rope.gguf --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --topk 64 --search-f16 -n 256 --kv f16 --far-pos group --json"
for r in a b; do
/tmp/subq-H5 $B -t 2 --prefill-ctx 32768 --attn hnsw > h_def_H5_$r.json 2>/dev/null
/tmp/subq-H1 $B -t 2 --prefill-ctx 32768 --attn hnsw > h_def_H1_$r.json 2>/dev/null
/tmp/subq-H5 $B -t 2 --prefill-ctx 32768 --attn exact --scan int4 > h_def_H5int4_$r.json 2>/dev/null
done
for r in a b; do
/tmp/subq-H5 $B -t 2 --prefill-ctx 32768 --tail 1024 --far-from 1024 --attn hnsw > h_t1024_H5_$r.json 2>/dev/null
/tmp/subq-H1 $B -t 2 --prefill-ctx 32768 --tail 1024 --far-from 1024 --attn hnsw > h_t1024_H1_$r.json 2>/dev/null
done
/tmp/subq-H5 $B -t 2 --prefill-ctx 131072 --attn hnsw > h_128_H5.json 2>/dev/null
sh -c 'while :; do :; done' & L1=$!
sh -c 'while :; do :; done' & L2=$!
/tmp/subq-H5 $B -t 2 --prefill-ctx 32768 --attn hnsw > h_load_H5_t2.json 2>/dev/null
/tmp/subq-H5 $B -t 1 --prefill-ctx 32768 --attn hnsw > h_load_H5_t1.json 2>/dev/null
/tmp/subq-H5 $B -t 2 --prefill-ctx 32768 --attn exact --scan int4 > h_load_H5int4_t2.json 2>/dev/null
/tmp/subq-H5 $B -t 1 --prefill-ctx 32768 --attn exact --scan int4 > h_load_H5int4_t1.json 2>/dev/null
kill $L1 $L2
echo done > fin.done
