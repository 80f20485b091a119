S=/work/main/build/subq
M=/work/shared/models/fixture-4k-29m-q8_0.gguf
R=/work/main/tests/models/fixture-4k-search-rope.gguf
T=/work/shared/data/text/wikitext-2-raw.test.txt
run() { name=$1; shift; s=$(date +%s.%N); "$@" > /dev/null 2>&1; rc=$?; e=$(date +%s.%N); echo "$name rc=$rc $(echo "$e - $s" | bc)"; }
one() {
for t in 2 1; do
run "$1 ppl-sparse t$t" $S perplexity -m $M -f $T -c 4096 --chunks 2 --search $R --select exact --topk 64 --kv f16 -t $t
run "$1 ppl-sparse-prefill t$t" $S perplexity -m $M -f $T -c 4096 --chunks 2 --search $R --select exact --topk 64 --kv f16 --sparse-prefill -t $t
run "$1 generate t$t" $S generate -m $M -f p12k.txt -n 128 --search $R --select exact --topk 64 --kv f16 -t $t
run "$1 train-search t$t" $S train-search -m $M -f /work/shared/data/text/tinyshakespeare.txt --steps 20 --seq 512 --d-search 32 -o /tmp/s84/ts.gguf --force -t $t
done
}
one quiet
sh -c 'while :; do :; done' & L1=$!
sh -c 'while :; do :; done' & L2=$!
one busy
kill $L1 $L2
echo done
