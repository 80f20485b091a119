#!/bin/bash
# Like-for-like baselines on stories260K (subq eval, issue 16): the learned
# selector beside Quest per query head (as the Quest paper and
# ann-sparseattention's quest_sweep.py) and the three oracles: the head-mean
# logit (subq's former only oracle), the cosine of head-mean q and k (the
# seed's raw-QK oracle, compare_retrieval.py) and each head's own exact top-K.
# Head-mean Quest (one page set per query, subq's former Quest) is run again
# for comparison.
#   1. exact, quest (per head), oracle per-head
#   2. quest --quest-mode headmean, oracle headmean-cosine
#   3. oracle headmean-dot
# All: the 200 held-out samples (512-token windows), layers 1-4, sink 4,
# tail 16, K 8-64, selection only.
# Usage: bench/eval_baselines.sh DIR
#   DIR holds gen_eval.jsonl and ds32_st.gguf (bench/notes/2026-11-history.md says how they
#   were made). Environment: SUBQ (binary, default ./build/subq), SHARED
#   (default ../shared), THREADS (default 2). Writes DIR/baselines_{1,2,3}.json (kept as bench/results/eval_baselines_{1,2,3}.json).
set -euo pipefail
D=${1:?usage: bench/eval_baselines.sh DIR}
B=${SUBQ:-./build/subq}
S=${SHARED:-../shared}
T=${THREADS:-2}
run() { # run N ARGS...
    local n=$1
    shift
    echo "== baselines_$n: subq eval $*" >&2
    OMP_WAIT_POLICY=passive /usr/bin/time -f "baselines_$n: %e s" "$B" eval -m "$S/models/stories260K.gguf" \
        --search "$D/ds32_st.gguf" --eval-file "$D/gen_eval.jsonl" --windows 200 --sparse-layers 1-4 \
        --k-sweep 8,16,32,64 -t "$T" --json "$@" > "$D/baselines_$n.json"
}
run 1 --selectors exact,quest,oracle --oracle per-head
run 2 --selectors quest,oracle --quest-mode headmean --oracle headmean-cosine
run 3 --selectors oracle --oracle headmean-dot
