#!/bin/bash
# Contexts larger than memory: decode with the KV cache in a file
# (--kv-file), warm and cold, against the cache in memory, on the
# Qwen3-0.6B shape at q8_0 (random weights from `subq synth`), every layer
# sparse (exact retrieval over random 64-wide projections, int4 scan codes
# and f16 search keys in memory), the cache filled synthetically; the disk's
# sequential write rate by dd in the same run; then a real 128K-token prefill
# of the 4K fixture model through a KV file with its memory use.
# Usage: bench/kv_file.sh DIR [CONTEXTS]   (DIR: where the files go; needs
#   ~70 GB free for 1M tokens; CONTEXTS default 131072,524288,1048576)
# Environment: SUBQ (default ./build/subq), SHARED (default ../shared),
# THREADS (default 2), STEPS (timed decode steps, default 16).
set -euo pipefail
D=${1:?usage: bench/kv_file.sh DIR [CONTEXTS]}
CTXS=${2:-131072,524288,1048576}
B=${SUBQ:-./build/subq}
S=$(cd "${SHARED:-../shared}" && pwd)
T=${THREADS:-2}
N=${STEPS:-16}
mkdir -p "$D"
M=$D/qwen3-0.6b-q8_0.gguf
[ -f "$M" ] || "$B" synth --shape qwen3-0.6b --type q8_0 -o "$M"
SPARSE=(--random-search 64 --sparse-layers all --search-f16 --scan int4 --kv q8_0)

echo "== disk: sequential write rate (dd, 4 GiB, direct I/O)"
dd if=/dev/zero of="$D/dd.tmp" bs=64M count=64 oflag=direct 2>&1 | tail -1
rm -f "$D/dd.tmp"

IFS=, read -r -a ctx_list <<< "$CTXS"
for ctx in "${ctx_list[@]}"; do
    c=$((ctx + N + 8))
    if [ "$ctx" -le 131072 ]; then
        echo "== $ctx tokens, cache in memory"
        "$B" bench -m "$M" --ctx "$ctx" --attn exact "${SPARSE[@]}" -n "$N" --prefill 0 -c "$c" -t "$T" --json \
            > "$D/mem_$ctx.json"
    fi
    rm -f "$D/kv_$ctx.kv"
    echo "== $ctx tokens, cache in $D/kv_$ctx.kv, page cache warm"
    "$B" bench -m "$M" --ctx "$ctx" --attn exact "${SPARSE[@]}" -n "$N" --prefill 0 -c "$c" -t "$T" --json \
        --kv-file "$D/kv_$ctx.kv" > "$D/file_$ctx.json"
    rm -f "$D/kv_$ctx.kv"
    echo "== $ctx tokens, cache in $D/kv_$ctx.kv, page cache dropped before the timed steps"
    "$B" bench -m "$M" --ctx "$ctx" --attn exact "${SPARSE[@]}" -n "$N" --prefill 0 -c "$c" -t "$T" --json \
        --kv-file "$D/kv_$ctx.kv" --kv-cold > "$D/cold_$ctx.json"
    ls -l "$D/kv_$ctx.kv"
    rm -f "$D/kv_$ctx.kv"
done

echo "== real prefill of 131072 tokens through a KV file (fixture, sparse prefill, every layer exact@64)"
F=$S/models/fixture-4k-29m-q8_0.gguf
rm -f "$D/prefill.kv"
/usr/bin/time -f "prefill run: %e s wall, %M KiB max resident (mapped file pages included)" \
    "$B" bench -m "$F" --prefill-ctx 131072 --attn exact --random-search 64 --sparse-layers all --search-f16 \
    --scan int4 --kv q8_0 -n 8 -c 131090 -t "$T" --json --kv-file "$D/prefill.kv" > "$D/prefill_131072.json"
ls -l "$D/prefill.kv"
rm -f "$D/prefill.kv"
for f in "$D"/*.json; do
    echo "$f"
    python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
for r in d.get('decode', []):
    # the cache's write rate: its bytes over the fill's KV writes plus the commit that makes them durable
    wr = r['kv_bytes'] / (r['kv_fill_s'] + r['sync_s']) / 1e9
    print('  %8d %-6s %7.2f tok/s  attn %.1f ms  select %.1f ms  fill %.0f s (KV %.0f s)  sync %.1f s  '
          'KV %.1f GB written at %.2f GB/s  anon %.0f MiB' % (
        r['ctx'], r['attn'], r['decode_tok_s'], r['attn_ms'], r['select_ms'], r['fill_s'], r['kv_fill_s'],
        r['sync_s'], r['kv_bytes'] / 1e9, wr, r['rss_anon_bytes'] / 2**20))
for r in d.get('prefill', []) if isinstance(d.get('prefill'), list) else []:
    print('  prefill %d: %.1f s, %.1f tok/s, decode %.2f tok/s' % (r['n_tokens'], r['seconds'], r['tok_s'],
          r['decode_tok_s']))
" "$f"
done
