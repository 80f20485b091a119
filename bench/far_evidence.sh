#!/usr/bin/env bash
# Issue 56's evidence on the 4K fixture: reading past the trained context.
# usage: bench/far_evidence.sh OUTDIR ppl|recall|recall1m ...
#   ppl       perplexity of WikiText-2 test (held out) at 4K, 16K and 64K on the
#             same scored tokens: full attention, dense windows of 4096, sinks +
#             window (StreamingLLM), Quest and learned exact@64 with each far scheme
#   recall    passkey grids at 4K, 16K, 64K and 128K (sparse prefill), heat maps
#   recall1m  passkey at 1M tokens, 10 prompts
# Every run writes OUTDIR/NAME.json (and .err); existing results are kept.
set -euo pipefail
OUT=${1:?usage: far_evidence.sh OUTDIR what...}; shift
HERE=$(cd "$(dirname "$0")/.." && pwd)
B=${SUBQ:-$HERE/build/subq}
SH=${SHARED:-$HERE/../shared}
M=$SH/models/fixture-4k-29m-q8_0.gguf
W=$SH/data/text/wikitext-2-raw.test.txt
S=$HERE/tests/models/fixture-4k-search-rope.gguf
T=${THREADS:-2}
FAR="--tail 1024 --far-from 1024"
mkdir -p "$OUT"

run() { # NAME ARGS...: subq ARGS > OUT/NAME.json, unless it is there
    local name=$1; shift
    [ -s "$OUT/$name.json" ] && return 0
    echo "== $name: subq $*" >&2
    local t0=$(date +%s)
    "$B" "$@" > "$OUT/$name.json.part" 2> "$OUT/$name.err" && mv "$OUT/$name.json.part" "$OUT/$name.json"
    echo "   $(( $(date +%s) - t0 )) s" >&2
}

for what in "$@"; do
case $what in
ppl)
    # chunks: about 32K scored tokens at each length
    for L in 4096 16384 65536; do
        c=$(( 65536 / L )); [ "$c" -lt 1 ] && c=1
        [ "$L" = 4096 ] && c=16; [ "$L" = 16384 ] && c=4; [ "$L" = 65536 ] && c=1
        P="perplexity -m $M -f $W -c $L --chunks $c -t $T --json"
        run ppl_${L}_windows $P --window 4096
        run ppl_${L}_full $P
        run ppl_${L}_streaming $P --select window --topk 0 $FAR --far-pos window
        run ppl_${L}_quest_window $P --select quest --topk 64 $FAR --far-pos window
        for f in window order group; do run ppl_${L}_exact_$f $P --search $S --topk 64 $FAR --far-pos $f; done
        run ppl_${L}_exact_none $P --search $S --topk 64 --tail 1024
    done ;;
recall)
    for L in 4096 16384 65536 131072; do
        methods=exact@64:window,exact@64:order,exact@64:group,window@0:window,quest@64:window
        [ "$L" -le 16384 ] && methods=full,$methods
        run recall_$L recall -m $M --haystack $W --search $S --lengths $L --depths 0,0.25,0.5,0.75,1 --trials 4 \
            --methods $methods --sparse-prefill $FAR -t $T --json --svg-dir "$OUT/svg_$L" --force
    done ;;
recall1m)
    run recall_1m recall -m $M --haystack $W --search $S --lengths 1048576 --depths 0.1,0.3,0.5,0.7,0.9 --trials 2 \
        --methods exact@64:window --sparse-prefill $FAR -t $T --kv q8_0 --search-f16 --scan int4 \
        --kv-file "$OUT/recall_1m.kv" --json --svg-dir "$OUT/svg_1m" --force ;;
*) echo "far_evidence.sh: unknown part '$what' (ppl, recall, recall1m)" >&2; exit 1 ;;
esac
done
