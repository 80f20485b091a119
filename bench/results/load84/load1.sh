B="/tmp/subq-H0 bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --search /work/main/tests/models/fixture-4k-search-rope.gguf --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --topk 64 --search-f16 -n 128 --kv f16 --far-pos group --tail 1024 --far-from 1024 --json --prefill-ctx 16384 --attn exact --scan int4"
sh -c 'while :; do :; done' & L1=$!
sh -c 'while :; do :; done' & L2=$!
$B -t 1 > l_t1.json 2>/dev/null
$B -t 2 > l_t2.json 2>/dev/null
OMP_WAIT_POLICY=passive $B -t 2 > l_t2p.json 2>/dev/null
kill $L1 $L2
$B -t 2 > q_t2.json 2>/dev/null
$B -t 1 > q_t1.json 2>/dev/null
echo done > load1.done
