#!/usr/bin/env bash
# Issue 57's evidence on the 4K fixture: learned search per head.
# usage: bench/perhead_evidence.sh OUTDIR train|eval|sweep|oracle|passkey|speed ...
#   sweep    d_search per head: head 8 x 32 and kv-head 2 x 128, trained, evaluated, decoded at 32K
#   train    search projections at each granularity on the same text and steps
#            (the shared text files, not the fixture's own corpus, which is not
#            in ../shared): layer 1 x 128, kv-head 2 x 64, head 8 x 64
#   eval     WikiText-2 test (held out), 16 windows of 4096, layers 1-7, tail 16,
#            learned exact at K = 64, 128, 256 for each file
#   oracle   the raw-QK oracles of each granularity on the same windows
#   passkey  pass key at 1K, 2K and 4K, dense and sparse prefill
#   speed    decode at 4K and 32K and sparse prefill at 8K on the fixture
#   speed_qwen  the same on the Qwen3-0.6B shape (QWEN=model) with random projections
#   long     one set per query head (8 x 64) trained three times as long (144 steps), evaluated
#            as in eval, at K = 64 with the completion maps of tests/models/fixture-4k-phi-4096.gguf, and its pass key
#   longer   120 more steps from OUTDIR/search_head_144.gguf (long's), evaluated as long is
#   group    decode per granularity with the binary from before (OLD=) and this one, alternated
#   native   the model's own W_q / W_k as search projections (--init native, per query head and per KV
#            head, 64 wide, rotated as the model rotates), evaluated ranking by dot (the raw-QK oracles'
#            ranking), the pass key per query head; 16 steps of training from there
#   native_cosine  native's files ranked by cosine
#   passkey_wide  the pass key of native's file and of longer's on 11 depths x 8 trials
# Every run writes OUTDIR/NAME.json (and .err); existing results are kept.
set -euo pipefail
OUT=${1:?usage: perhead_evidence.sh OUTDIR what...}; shift
HERE=$(cd "$(dirname "$0")/.." && pwd)
B=${SUBQ:-$HERE/build/subq}
SH=${SHARED:-$HERE/../shared}
M=$SH/models/fixture-4k-29m-q8_0.gguf
W=$SH/data/text/wikitext-2-raw.test.txt
D=$SH/data/text
T=${THREADS:-2}
GRANS=${GRANS:-layer kv-head head}
mkdir -p "$OUT"

. "$HERE/bench/evidence_run.sh"

width() { case $1 in layer) echo 128 ;; *) echo 64 ;; esac; }
# train NAME GRANULARITY D_SEARCH [STEPS WARMUP EXTRA...], eval NAME [EXTRA...]: the same text, steps
# and windows for every file; later options override earlier ones
train() {
    local name=$1 g=$2 ds=$3 steps=${4:-48} warmup=${5:-8}
    shift $(($# < 5 ? $# : 5))
    run train_$name train-search -m "$M" -f "$D/wikitext-103.train-prefix.tokens.txt" \
        -f "$D/wikitext-103.valid.tokens.txt" -f "$D/pride-and-prejudice.txt" -f "$D/ulysses.txt" \
        --reserve 0 --granularity "$g" --d-search "$ds" --rope-dims $((ds / 2)) --seq 4096 --batch 2 \
        --steps "$steps" --warmup "$warmup" --lr 3e-3 --eval-every $((steps / 2)) --eval-tokens 16384 \
        --save-every 8 -t "$T" -o "$OUT/search_$name.gguf" --force --json "$@"
}
evaluate() {
    local name=$1 file=${1%_phi}
    shift
    run eval_$name eval -m "$M" --eval-file "$W" -c 4096 --windows 16 --search "$OUT/search_${file%_dot}.gguf" \
        --sparse-layers 1-7 --selectors exact --k-sweep 64,128,256 --static-split 0 -t "$T" --json "$@"
}
# passkey NAME [SUFFIX EXTRA...]: results passkey_NAME[SUFFIX]_dense|sparse
passkey() {
    local name=$1 suffix=${2:-}
    shift $(($# < 2 ? $# : 2))
    for p in dense sparse; do
        pf=; [ "$p" = sparse ] && pf=--sparse-prefill
        run passkey_$name${suffix}_$p recall -m "$M" --haystack "$W" --search "$OUT/search_$name.gguf" \
            --lengths 1024,2048,4096 --depths 0,0.25,0.5,0.75,1 --trials 4 --methods full,exact@64 $pf -t "$T" --json "$@"
    done
}

for what in "$@"; do
case $what in
train) for g in $GRANS; do train "$g" "$g" "$(width "$g")"; done ;;
eval) for g in $GRANS; do evaluate "$g"; done ;;
sweep)
    # d_search per head: query heads at 32 (half of train's), KV heads at 128 (twice)
    for spec in head:32 kv-head:128; do
        g=${spec%:*} ds=${spec#*:}
        train "${g}_$ds" "$g" "$ds"
        evaluate "${g}_$ds"
        run decode_32768_${g}_$ds bench -m "$M" --ctx 32768 --attn exact --search "$OUT/search_${g}_$ds.gguf" \
            --prefill 0 -n 16 -t "$T" --json
    done ;;
oracle)
    for o in headmean-dot per-kv-head per-head; do
        run oracle_$o eval -m "$M" --eval-file "$W" -c 4096 --windows 16 --sparse-layers 1-7 --selectors oracle \
            --oracle "$o" --k-sweep 64,128,256 --static-split 0 -t "$T" --json
    done ;;
passkey) for g in $GRANS; do passkey "$g"; done ;;
long)
    train head_144 head 64 144 12
    evaluate head_144
    evaluate head_144_phi --complete "$HERE/tests/models/fixture-4k-phi-4096.gguf" --k-sweep 64
    passkey head_144 ;;
longer)
    # 120 more steps from the 144-step file (warm restart: fresh optimiser, peak lr 1e-3, another data
    # order), 264 in all
    train head_264 head 64 120 4 --init "$OUT/search_head_144.gguf" --lr 1e-3 --seed 2 --eval-every 0 \
        --eval-tokens 8192
    evaluate head_264
    evaluate head_264_phi --complete "$HERE/tests/models/fixture-4k-phi-4096.gguf" --k-sweep 64
    passkey head_264 ;;
speed)
    for g in $GRANS; do
        for c in 4096 32768; do
            run decode_${c}_$g bench -m "$M" --ctx $c --attn exact --search "$OUT/search_$g.gguf" --prefill 0 -n 32 \
                -t "$T" --json
        done
        run prefill_8192_$g bench -m "$M" --prefill-ctx 8192 --prefill-text "$W" --attn exact \
            --search "$OUT/search_$g.gguf" -n 4 -t "$T" --json
    done ;;
speed_qwen)
    # the Qwen3-0.6B shape (QWEN=subq synth --shape qwen3-0.6b --type q8_0), random projections of
    # each granularity: decode at 32K, sparse prefill at 8K
    Q=${QWEN:?speed_qwen needs QWEN=model.gguf}
    for cfg in layer:128 kv-head:16 head:16 kv-head:64; do
        g=${cfg%%:*} ds=${cfg##*:}
        run qwen_decode_32768_${g}_$ds bench -m "$Q" --ctx 32768 --attn exact --random-search "$ds" \
            --random-search-heads "$g" --kv f16 --prefill 0 -n 32 -t "$T" --json
        run qwen_prefill_8192_${g}_$ds bench -m "$Q" --prefill-ctx 8192 --prefill-text "$W" --attn exact \
            --random-search "$ds" --random-search-heads "$g" --kv f16 -n 4 -t "$T" --json
    done ;;
group)
    # decode with a KV head's query search heads scanned together, against the binary from before
    # (OLD=path): the fixture at 4K and 32K, the Qwen3-0.6B shape (QWEN=model) at 32K, random projections
    # of each granularity; and sparse prefill at 8K on the fixture; alternated over 3 rounds
    O=${OLD:?group needs OLD=binary from before}
    Q=${QWEN:?group needs QWEN=model.gguf}
    # both NAME ARGS...: NAME_old_R with the binary from before, then NAME_new_R with this one
    both() { local name=$1; shift; B=$O run "${name}_old_$r" "$@"; run "${name}_new_$r" "$@"; }
    for r in 1 2 3; do
        for cfg in fixture:4096:layer:128 fixture:4096:head:64 fixture:32768:layer:128 fixture:32768:kv-head:64 \
            fixture:32768:head:64 qwen:32768:layer:128 qwen:32768:kv-head:16 qwen:32768:head:16; do
            IFS=: read -r mname c g ds <<< "$cfg"
            mf=$M; [ "$mname" = qwen ] && mf=$Q
            both group_${mname}_${c}_$g bench -m "$mf" --ctx "$c" --attn exact --random-search "$ds" \
                --random-search-heads "$g" --kv f16 --prefill 0 -n 32 -t "$T" --json
        done
        for g in layer:128 kv-head:64 head:64; do # sparse prefill at 8K on the fixture
            both group_prefill_8192_${g%:*} bench -m "$M" --prefill-ctx 8192 --prefill-text "$W" --attn exact \
                --random-search "${g#*:}" --random-search-heads "${g%:*}" --kv f16 -n 4 -t "$T" --json
        done
    done ;;
native)
    train native_head head 64 1 1 --init native --rope-dims 64 --lr 0 --eval-every 0
    evaluate native_head_dot --score dot
    passkey native_head _dot --score dot
    train native_kv-head kv-head 64 1 1 --init native --rope-dims 64 --lr 0 --eval-every 0
    evaluate native_kv-head_dot --score dot
    train native_head_16 head 64 16 2 --init native --rope-dims 64 --lr 1e-4 --eval-every 0 --eval-tokens 8192
    evaluate native_head_16_dot --score dot ;;
native_cosine) evaluate native_head; evaluate native_head_16 ;;
passkey_wide)
    # the pass key on a finer grid (11 depths x 8 trials at 1K / 2K / 4K): native's file by dot, and the
    # 264-step one (HEAD264=search_head_264.gguf, from longer)
    H=${HEAD264:?passkey_wide needs HEAD264=search_head_264.gguf}
    wide="--depths 0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1 --trials 8"
    passkey native_head _dot_wide --score dot $wide
    passkey head_264 _wide --search "$H" $wide ;;
*) echo "perhead_evidence.sh: unknown part '$what' (train, eval, sweep, oracle, passkey, speed, speed_qwen, long, longer, group, native, native_cosine, passkey_wide)" >&2; exit 1 ;;
esac
done
