#!/bin/bash
# The method's evidence on the 4K-context fixture model (issue 30): learned
# search projections and completion maps trained on the fixture's own
# training text, then fidelity (subq eval) and needle recall (subq recall)
# on WikiText-2 test, which the fixture never saw.
# Usage: bench/fixture_evidence.sh DIR STAGE...
#   STAGE: data | search | phi | eval | recall | all (in that order), and for
#   the search space that rotates by position (issue 42):
#   rope_search | rope_eval | rope_length | rope_phi | rope_recall | rope (all five)
#   data    rebuilds the fixture's training text into DIR/corpus.jsonl (~1 min)
#   search  train-search, reserve 0 (layers 1-7)
#   phi     train-phi on layers 1-7
#   eval    subq eval at 4096-token windows, K 64/128/256, every selector,
#           selection only and with completion, per layer at K 64
#   recall  passkey, niah-multikey, niah-multivalue grids with dense prefill; passkey sparse
#   rope_search  train-search, d_search 128, the last 64 dims rotated by position, 4096-token
#           sequences, batch 4 (~4.3M tokens)
#   rope_eval    subq eval, 16 windows of 4096: the rotated space beside the position-free one
#           and every baseline, K 64/128/256
#   rope_length  trained at 1024, evaluated at 4096: as it is, with position interpolation,
#           and after a short run at 4096 (--init), against training at 4096
#   rope_phi     train-phi at 4096 tokens; eval exact@64 with and without the completion
#   rope_recall  passkey grids, dense and sparse prefill, with the rotated space
# Environment: SUBQ (binary, default ./build/subq), SHARED (default ../shared),
# THREADS (default 2), WINDOWS (eval windows, default 4 as in BENCHMARKS.md).
# Outputs (JSON, logs, SVG charts) go under DIR; BENCHMARKS.md quotes them
# (bench/fixture_tables.py makes its tables from the JSON).
set -euo pipefail
D=${1:?usage: bench/fixture_evidence.sh DIR STAGE...}
shift
B=${SUBQ:-./build/subq}
S=$(cd "${SHARED:-../shared}" && pwd)
T=${THREADS:-2}
NW=${WINDOWS:-4}
M=$S/models/fixture-4k-29m-q8_0.gguf
W=$S/data/text/wikitext-2-raw.test.txt
mkdir -p "$D"
export OMP_WAIT_POLICY=passive
timed() { # timed NAME CMD...: the command, its wall time on stderr
    local name=$1
    shift
    echo "== $name: $*" >&2
    /usr/bin/time -f "$name: %e s" "$@"
}

stage_data() {
    [ -f "$D/corpus.jsonl" ] || bash "$S/fixture/make-fixture.sh" "$D" data
}

# 512 steps of one packed 4096-token sequence (1.72M tokens on this corpus;
# mass@64 stops rising after step 256); the held-out split is 5% of the
# corpus' pieces, 32K tokens of it per evaluation. Reserve 0 only: each
# layer's projections learn from that layer's teacher alone, so a
# `--reserve 0,-1` run would train layers 1-6 as this one does; eval's
# r0m1 row substitutes layers 1-6 with these projections instead.
stage_search() {
    local out=$D/search_r0.gguf
    timed "train-search reserve 0" "$B" train-search -m "$M" -f "$D/corpus.jsonl" --reserve 0 \
        --d-search 64 --seq 4096 --steps 512 --warmup 50 --lr 3e-3 --eval-every 128 --eval-tokens 32768 \
        --save-every 64 -t "$T" -o "$out" > "$out.out" 2>&1
}

stage_phi() {
    timed train-phi "$B" train-phi -m "$M" -f "$D/corpus.jsonl" --layers 1-7 --seq 1024 --steps 600 --lr 3e-3 \
        --warmup 50 --l-kl 0.9 --eval-every 200 --eval-tokens 16384 --save-every 100 -t "$T" -o "$D/phi.gguf" \
        > "$D/phi.out" 2>&1
}

# eval NAME PROJ LAYERS ARGS...
run_eval() {
    local name=$1 proj=$2 layers=$3
    shift 3
    mkdir -p "$D/eval_$name"
    timed "eval $name" "$B" eval -m "$M" --eval-file "$W" -c 4096 --windows "$NW" --search "$proj" \
        --sparse-layers "$layers" -t "$T" --svg-dir "$D/eval_$name" --force --json "$@" > "$D/eval_$name.json"
}

stage_eval() {
    local p=$D/search_r0.gguf
    run_eval r0 "$p" 1-7 --selectors exact,hnsw,quest,oracle,window --k-sweep 64,128,256 --complete "$D/phi.gguf" \
        --compare exact@64,quest@64
    run_eval r0m1 "$p" 1-6 --selectors exact,quest,window --k-sweep 64,256 --static-split 0
    run_eval questhm "$p" 1-7 --selectors quest --quest-mode headmean --k-sweep 64,128,256 --static-split 0
    run_eval perlayer "$p" 1-7 --selectors exact,quest,oracle,window --k-sweep 64 --per-layer --windows 2 \
        --static-split 0
    # learned keys beside a longer recency tail, at the key budgets of K = 64, 128, 256, 512 with tail 16
    local k
    for k in 32:48 64:80 128:144 256:272; do
        run_eval "tail${k#*:}" "$p" 1-7 --selectors exact --k-sweep "${k%:*}" --tail "${k#*:}" --static-split 0
    done
    run_eval base512 "$p" 1-7 --selectors quest,oracle,window --k-sweep 512 --static-split 0
    # completion at the context its maps were trained for
    run_eval phi1024 "$p" 1-7 --selectors exact,window --k-sweep 64 --complete "$D/phi.gguf" -c 1024 --windows 8 \
        --static-split 0
}

# Dense prefill: every method on the three tasks (~8 min each on one thread).
# Sparse prefill: passkey only (the fixture fails the other two tasks with
# full attention), without quest and completion, which prefill token by
# token (their grid ran past 30 minutes).
stage_recall() {
    local task
    for task in passkey niah-multikey niah-multivalue; do
        local max_new=16
        [ "$task" = niah-multivalue ] && max_new=40 # four 7-digit numbers, one token per digit
        recall_grid "recall_${task}_dense" "$task" "$max_new" full,exact@64,exact@128,hnsw@64,quest@64,window@64,exact@64+phi
    done
    recall_grid recall_passkey_sparse passkey 16 full,exact@64,exact@128,hnsw@64,window@64 --sparse-prefill
}

# recall_grid NAME TASK MAX_NEW METHODS ARGS...
recall_grid() {
    local name=$1 task=$2 max_new=$3 methods=$4
    shift 4
    mkdir -p "$D/$name"
    timed "$name" "$B" recall -m "$M" --haystack "$W" --task "$task" --lengths 1024,2048,4096 \
        --depths 0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1 --trials 4 --max-new "$max_new" --methods "$methods" \
        --search "$D/search_r0.gguf" --complete "$D/phi.gguf" --sparse-layers 1-7 -t "$T" --svg-dir "$D/$name" \
        --force --json "$@" > "$D/$name.json"
}

# ---- the search space that rotates by position (issue 42) -------------------

# 320 steps of 4 packed 4096-token sequences (~4.3M tokens), d_search 128 with
# its last 64 dims rotated (base 10000), as the independent study of the issue
stage_rope_search() {
    local out=$D/search_rope.gguf
    timed "train-search rope" "$B" train-search -m "$M" -f "$D/corpus.jsonl" --reserve 0 --d-search 128 \
        --rope-dims 64 --seq 4096 --batch 4 --steps 320 --warmup 30 --lr 3e-3 --eval-every 80 --eval-tokens 32768 \
        --save-every 16 -t "$T" -o "$out" > "$out.out" 2>&1
}

stage_rope_eval() {
    local p=$D/search_rope.gguf
    run_eval rope "$p" 1-7 --windows 16 --selectors exact,hnsw,quest,oracle,window --k-sweep 64,128,256 \
        --compare exact@64,oracle@64 --static-split 0
    run_eval rope_flat "$(dirname "$0")/../tests/models/fixture-4k-search.gguf" 1-7 --windows 16 --selectors exact \
        --k-sweep 64,128,256 --static-split 0
    run_eval rope_hnsw_ef128 "$p" 1-7 --windows 16 --selectors hnsw --k-sweep 64 --hnsw-ef-search 128 --static-split 0
}

# Train short, serve 4x longer: 104 steps of 4 x 1024 tokens (~0.40M), then
# evaluated at 4096 as it is, with positions x 1/4 (position interpolation),
# and after 32 steps of 4 x 4096 tokens started from it (--init); the
# control: the same 32 steps from random weights
stage_rope_length() {
    local p1=$D/search_rope_1k.gguf p2=$D/search_rope_1k_ft.gguf p3=$D/search_rope_4k_32.gguf
    timed "train-search rope 1024" "$B" train-search -m "$M" -f "$D/corpus.jsonl" --reserve 0 --d-search 128 \
        --rope-dims 64 --seq 1024 --batch 4 --steps 104 --warmup 10 --lr 3e-3 --eval-every 0 --eval-tokens 32768 \
        --save-every 16 -t "$T" -o "$p1" > "$p1.out" 2>&1
    timed "train-search rope 1024 + 4096" "$B" train-search -m "$M" -f "$D/corpus.jsonl" --reserve 0 \
        --d-search 128 --rope-dims 64 --init "$p1" --seq 4096 --batch 4 --steps 32 --warmup 4 --lr 1e-3 \
        --eval-every 0 --eval-tokens 32768 --save-every 8 -t "$T" -o "$p2" > "$p2.out" 2>&1
    timed "train-search rope 4096, 32 steps" "$B" train-search -m "$M" -f "$D/corpus.jsonl" --reserve 0 \
        --d-search 128 --rope-dims 64 --seq 4096 --batch 4 --steps 32 --warmup 4 --lr 3e-3 \
        --eval-every 0 --eval-tokens 32768 --save-every 8 -t "$T" -o "$p3" > "$p3.out" 2>&1
    run_eval len_1k "$p1" 1-7 --windows 16 --selectors exact --k-sweep 64 --static-split 0
    run_eval len_1k_pi "$p1" 1-7 --windows 16 --selectors exact --k-sweep 64 --static-split 0 --search-rope-scale 0.25
    run_eval len_1k_ft "$p2" 1-7 --windows 16 --selectors exact --k-sweep 64 --static-split 0
    run_eval len_4k_32 "$p3" 1-7 --windows 16 --selectors exact --k-sweep 64 --static-split 0
    run_eval len_1k_at1k "$p1" 1-7 -c 1024 --windows 64 --selectors exact --k-sweep 64 --static-split 0
    run_eval len_4k_at1k "$D/search_rope.gguf" 1-7 -c 1024 --windows 64 --selectors exact --k-sweep 64 --static-split 0
}

stage_rope_phi() {
    timed "train-phi 4096" "$B" train-phi -m "$M" -f "$D/corpus.jsonl" --layers 1-7 --seq 4096 --steps 150 \
        --lr 3e-3 --warmup 15 --l-kl 0.9 --eval-every 50 --eval-tokens 16384 --save-every 25 -t "$T" \
        -o "$D/phi4k.gguf" > "$D/phi4k.out" 2>&1
    run_eval rope_phi4k "$D/search_rope.gguf" 1-7 --windows 16 --selectors exact,window --k-sweep 64 \
        --complete "$D/phi4k.gguf" --static-split 0
}

stage_rope_recall() {
    local name
    for name in dense sparse; do
        mkdir -p "$D/rope_recall_$name"
        timed "rope_recall_$name" "$B" recall -m "$M" --haystack "$W" --task passkey --lengths 1024,2048,4096 \
            --depths 0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1 --trials 4 --max-new 16 \
            --methods full,exact@64,exact@128,hnsw@64,window@64 --search "$D/search_rope.gguf" --sparse-layers 1-7 \
            -t "$T" --svg-dir "$D/rope_recall_$name" --force --json $([ $name = sparse ] && echo --sparse-prefill) \
            > "$D/rope_recall_$name.json"
    done
}

for stage in "$@"; do
    case $stage in
    data | search | phi | eval | recall | rope_search | rope_eval | rope_length | rope_phi | rope_recall) "stage_$stage" ;;
    all) stage_data && stage_search && stage_phi && stage_eval && stage_recall ;;
    rope) stage_rope_search && stage_rope_eval && stage_rope_length && stage_rope_phi && stage_rope_recall ;;
    *) echo "unknown stage $stage (data, search, phi, eval, recall, all; rope_search, rope_eval, rope_length, rope_phi, rope_recall, rope)" >&2 && exit 2 ;;
    esac
done
