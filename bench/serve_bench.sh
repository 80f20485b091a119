#!/usr/bin/env bash
# subq serve benchmarks behind BENCHMARKS.md:
#   1. stories260K: requests/s (200 requests, 8 concurrent connections, 16
#      tokens each) and time to first token (streamed, one at a time);
#   2. Qwen3-0.6B shape (random q8_0 weights from subq synth): a document of
#      about 4096 tokens, then 10 follow-up questions against it; the prefill
#      the prompt cache saves against prefilling each question's whole prompt.
# Usage: bench/serve_bench.sh [SHARED_DIR] (default ../shared); DOC_TOKENS=N
# changes the document size (default 4096). Prints JSON lines.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${1:-../shared}
BIN=./build/subq
TMP=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"' EXIT

start() { # start the server with "$@"; sets PID and URL
  "$BIN" serve --port 0 "$@" 2>"$TMP/log" &
  PID=$!
  for _ in $(seq 600); do
    PORT=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9]*\) .*/\1/p' "$TMP/log")
    [ -n "$PORT" ] && break
    sleep 0.1
  done
  [ -n "$PORT" ] || { cat "$TMP/log" >&2; exit 1; }
  URL=http://127.0.0.1:$PORT
}
stop() { kill "$PID"; wait "$PID" || true; }

echo "uptime: $(uptime)"
start -m "$SHARED/models/stories260K.gguf"
echo "stories260K load: $(node bench/serve_bench.mjs load "$URL" 200 8)"
stop

"$BIN" synth --shape qwen3-0.6b --type q8_0 -o "$TMP/qwen3.gguf" >/dev/null
# a document of about DOC_TOKENS tokens of this vocabulary: cut by the measured bytes per token
DOC_TOKENS=${DOC_TOKENS:-4096}
head -c 40000 "$SHARED/data/text/pride-and-prejudice.txt" > "$TMP/doc.txt"
n=$("$BIN" tokenize -m "$TMP/qwen3.gguf" -f "$TMP/doc.txt" | wc -w)
head -c $((40000 * DOC_TOKENS / n)) "$TMP/doc.txt" > "$TMP/doc4k.txt"
start -m "$TMP/qwen3.gguf" -c $((DOC_TOKENS + 512)) --kv f16
echo "qwen3-0.6b q8_0 cache: $(node bench/serve_bench.mjs cache "$URL" "$TMP/doc4k.txt")"
stop
echo "uptime: $(uptime)"
