#!/usr/bin/env bash
# Issue 56's evidence on the 4K fixture: reading past the trained context.
# usage: bench/far_evidence.sh OUTDIR ppl|recall|recall1m ...
#   ppl       perplexity of WikiText-2 test (held out) at 4K, 16K and 64K on the
#             same scored tokens: full attention, dense windows of 4096, sinks +
#             window (StreamingLLM), Quest and learned exact@64 with each far scheme
#   recall    passkey grids at 4K, 16K, 64K and 128K (sparse prefill), heat maps
#             (RECALL_LENGTHS="65536" for some of them)
#   multikey  RULER's multi-key needles (4 a prompt, one asked) at 16K
#   recall1m  passkey at 1M tokens, one prompt a run (RECALL1M="DEPTH:SEED ...", default 0.5:1)
# HAYSTACK=filler: recall's haystack is the pass-key test's filler (no --haystack), not WikiText
#   probe     recall@64 of the prompt's block scan against the full scan at 128K
#   decode    decode at 128K, with OLD=binary also the binary from before
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
HAY="--haystack $W"; [ "${HAYSTACK:-}" = filler ] && HAY=""
mkdir -p "$OUT"

. "$HERE/bench/evidence_run.sh"

for what in "$@"; do
case $what in
ppl)
    # about 64K scored tokens at 4K and 16K, one 64K window at 64K (full
    # attention and Quest past 4K do not fit the time here)
    for L in 4096 16384 65536; do
        c=1; [ "$L" = 4096 ] && c=16; [ "$L" = 16384 ] && c=4
        P="perplexity -m $M -f $W -c $L --chunks $c -t $T --json"
        run ppl_${L}_windows $P --window 4096
        run ppl_${L}_streaming $P --select window --topk 0 $FAR --far-pos window
        for f in window order group; do run ppl_${L}_exact_$f $P --search $S --topk 64 $FAR --far-pos $f; done
        [ "$L" -le 16384 ] && run ppl_${L}_full $P
        [ "$L" -le 16384 ] && run ppl_${L}_exact_none $P --search $S --topk 64 --tail 1024
        [ "$L" = 4096 ] && run ppl_${L}_quest_window $P --select quest --topk 64 $FAR --far-pos window
    done ;;
recall)
    # depths 0, 0.5 and 1, 4 trials a cell; the methods that fit the time at each length
    for L in ${RECALL_LENGTHS:-4096 16384 65536 131072}; do
        case $L in
        4096)  methods=full,exact@64,exact@64:window,exact@64:order,window@0:window,quest@64:window ;;
        16384) methods=exact@64:window,exact@64:order,exact@64:group,window@0:window ;;
        65536) methods=exact@64:window,window@0:window ;;
        *)     methods=exact@64:window ;;
        esac
        mkdir -p "$OUT/svg_$L"
        run recall_$L recall -m $M $HAY --search $S --lengths $L --depths 0,0.5,1 --trials 4 \
            --methods $methods --sparse-prefill $FAR -t $T --json --svg-dir "$OUT/svg_$L" --force
    done ;;
multikey)
    run multikey_16384 recall -m $M $HAY --search $S --task niah-multikey --lengths 16384 --depths 0,0.5,1 \
        --trials 4 --methods exact@64:window,window@0:window --sparse-prefill $FAR -t $T --json ;;
recall1m)
    for ds in ${RECALL1M:-0.5:1}; do
        d=${ds%:*} seed=${ds#*:}; name=recall_1m; [ -n "${RECALL1M:-}" ] && name=recall_1m_d${d}_s$seed
        run $name recall -m $M $HAY --search $S --lengths 1048576 --depths $d --trials 1 --seed $seed \
            --methods exact@64:window --sparse-prefill $FAR -t $T --kv q8_0 --search-f16 --scan int4 \
            --kv-file "$OUT/recall_1m.kv" --json
        rm -f "$OUT/recall_1m.kv"   # 4.4 GB
    done ;;
probe)
    # recall@64 of the prompt's block scan against the full scan at 128K (every 16th token)
    P="bench -m $M --prefill-ctx 131072 --prefill-text $W --attn exact --search $S --kv q8_0 -n 4 -t $T --probe-check 16 --json"
    run probe_128k_none_reps8 $P --block-reps 8
    for r in 8 16; do run probe_128k_far_reps$r $P $FAR --far-pos window --block-reps $r; done
    for np in 128 192; do run probe_128k_far_reps16_np$np $P $FAR --far-pos window --block-reps 16 --nprobe $np; done ;;
decode)
    # decode at 128K beside the binary from before (OLD=path), far keys off, alternated 3 times
    P="-m $M --ctx 131072 --attn full,exact --search $S --kv q8_0 --prefill 0 -n 64 -t $T --json"
    for i in 1 2 3; do
        run decode_128k_new_$i bench $P
        [ -n "${OLD:-}" ] && B=$OLD run decode_128k_old_$i bench $P
    done ;;
*) echo "far_evidence.sh: unknown part '$what' (ppl, recall, multikey, recall1m, probe, decode)" >&2; exit 1 ;;
esac
done
