#!/bin/bash
# Resuming an HNSW session from a KV file: the graphs read from FILE.hnsw
# against rebuilt by inserting every key (FILE.hnsw moved away), the exact
# scan's resume as the floor, and optionally another binary (OLD, which
# rebuilds), alternated RUNS times. The 4K fixture with its rope search
# projections, --select hnsw --far-pos group --search-f16, a real WikiText-2
# prompt of about CTX tokens prefilled once (sparse prefill). Each resume
# generates 4 tokens and, with this binary, writes FILE.hnsw again as it ends
# (counted in its time).
# Usage: bench/resume_hnsw.sh DIR CTX   (CTX e.g. 32768 or 131072)
# Environment: SUBQ (default ./build/subq), OLD (a binary from before, unset:
# none), SHARED (default ../shared), THREADS (default 2), RUNS (default 3).
set -euo pipefail
D=${1:?usage: bench/resume_hnsw.sh DIR CTX}
CTX=${2:?usage: bench/resume_hnsw.sh DIR CTX}
B=${SUBQ:-./build/subq}
S=$(cd "${SHARED:-../shared}" && pwd)
R=$(cd "$(dirname "$0")/.." && pwd)
T=${THREADS:-2}
mkdir -p "$D"
F=$D/resume_$CTX.kv
# about 3.1 bytes of WikiText-2 a token
head -c $((CTX * 3)) "$S/data/text/wikitext-2-raw.test.txt" > "$D/prompt_$CTX.txt"
A=(-m "$S/models/fixture-4k-29m-q8_0.gguf" --search "$R/tests/models/fixture-4k-search-rope.gguf" --topk 64
   --far-pos group --search-f16 -c $((CTX + 1024)) -n 4 -t "$T" --temp 0)
rm -f "$F" "$F.hnsw"
echo "== prefill ($CTX tokens of text at most)"
"$B" generate "${A[@]}" --select hnsw --sparse-prefill --kv-file "$F" -f "$D/prompt_$CTX.txt" > /dev/null 2> "$D/prefill_$CTX.err"
tail -1 "$D/prefill_$CTX.err"
timed() { # label, then the command
    local label=$1 t0 t1
    shift
    t0=$(date +%s.%N)
    "$@" > /dev/null 2> "$D/last.err"
    t1=$(date +%s.%N)
    printf '%-28s %6.2f s  %s\n' "$label" "$(echo "$t1 - $t0" | bc)" "$(grep -o 'HNSW graphs of [0-9]* read' "$D/last.err" || true)"
}
for run in $(seq "${RUNS:-3}"); do
    echo "== run $run"
    timed "exact scan" "$B" generate "${A[@]}" --select exact --kv-file "$F"
    timed "hnsw, FILE.hnsw read" "$B" generate "${A[@]}" --select hnsw --kv-file "$F"
    mv "$F.hnsw" "$F.hnsw.kept"
    timed "hnsw, rebuilt" "$B" generate "${A[@]}" --select hnsw --kv-file "$F"
    if [ -n "${OLD:-}" ]; then
        rm -f "$F.hnsw"
        timed "hnsw, binary before" "$OLD" generate "${A[@]}" --select hnsw --kv-file "$F"
    fi
    mv "$F.hnsw.kept" "$F.hnsw" # the older graphs: read as far as they go, the rest inserted
done
ls -l "$F" "$F.hnsw"
