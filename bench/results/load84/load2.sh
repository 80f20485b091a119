for cfg in "--attn exact --scan int4" "--attn hnsw"; do
tag=$(echo $cfg | tr -d ' -')
B="bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --search /work/main/tests/models/fixture-4k-search-rope.gguf --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --topk 64 --search-f16 -n 128 --kv f16 --far-pos group --tail 1024 --far-from 1024 --json --prefill-ctx 16384 $cfg"
sh -c 'while :; do :; done' & L1=$!
sh -c 'while :; do :; done' & L2=$!
/tmp/subq-H1 $B -t 2 > l2_${tag}_H1t2.json 2>/dev/null
/tmp/subq-H0 $B -t 2 > l2_${tag}_H0t2.json 2>/dev/null
/tmp/subq-H1 $B -t 1 > l2_${tag}_H1t1.json 2>/dev/null
kill $L1 $L2
/tmp/subq-H1 $B -t 2 > q2_${tag}_H1t2.json 2>/dev/null
/tmp/subq-H0 $B -t 2 > q2_${tag}_H0t2.json 2>/dev/null
done
echo done > load2.done
