#!/bin/bash
# Fidelity of sparse attention to full attention on stories260K (subq eval):
# KL(p_full || p_method), top-1 agreement and the perplexity gap of the
# learned (exact), Quest, oracle and window selectors (hnsw is within 0.1%
# of exact at these sizes and left out to save time),
#   1. on the model's own held-out samples (200 windows of 512 tokens),
#      K 8-64, selection only and with completion;
#   2. each sparse layer substituted alone (50 windows, K 32, both modes);
#   3. on bytes 100,000-299,999 of pride-and-prejudice.txt and of ulysses.txt,
#      text the model cannot model well (all 223 / 235 windows), selection only.
# Usage: bench/eval_fidelity.sh DIR
#   DIR holds gen_eval.jsonl (held-out samples), ds32_st.gguf (projections) and
#   phi.gguf (completion maps); bench/notes/2026-11-history.md says how they were made.
# Environment: SUBQ (binary, default ./build/subq), SHARED (default ../shared),
# THREADS (default 2). Writes DIR/eval_{indomain,perlayer,pride,ulysses}.json and SVG
# charts under DIR/{indomain,perlayer,pride,ulysses}/.
set -euo pipefail
D=${1:?usage: bench/eval_fidelity.sh DIR}
B=${SUBQ:-./build/subq}
S=${SHARED:-../shared}
T=${THREADS:-2}
M=$S/models/stories260K.gguf
head -c 300000 "$S/data/text/pride-and-prejudice.txt" | tail -c 200000 > "$D/pp_100000_300000.txt"
head -c 300000 "$S/data/text/ulysses.txt" | tail -c 200000 > "$D/ul_100000_300000.txt"
mkdir -p "$D/indomain" "$D/perlayer" "$D/pride" "$D/ulysses"
run() { # run NAME ARGS...
    local name=$1
    shift
    echo "== $name: subq eval $*" >&2
    OMP_WAIT_POLICY=passive /usr/bin/time -f "$name: %e s" "$B" eval -m "$M" --search "$D/ds32_st.gguf" \
        --selectors exact,quest,oracle,window -t "$T" --svg-dir "$D/$name" --force --json "$@" > "$D/eval_$name.json"
}
run indomain --eval-file "$D/gen_eval.jsonl" --windows 200 --k-sweep 8,16,32,64 --complete "$D/phi.gguf" \
    --compare exact@64,quest@64
run perlayer --eval-file "$D/gen_eval.jsonl" --windows 50 --k-sweep 32 --complete "$D/phi.gguf" --per-layer \
    --static-split 0
run pride --eval-file "$D/pp_100000_300000.txt" --windows 1000 --k-sweep 8,16,32,64
run ulysses --eval-file "$D/ul_100000_300000.txt" --windows 1000 --k-sweep 8,32,64
