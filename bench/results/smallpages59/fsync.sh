#!/bin/bash
# fdatasync times (strace -T) while NEW and OLD decode 64 tokens at 128K through --kv-file: the last 8 calls
NEW=${NEW:-/work/main/build/subq}; OLD=${OLD:-/tmp/oldwt/build/subq}; F=${F:-/tmp/kv128k.kv}
C="-m /tmp/qwen3-0.6b-q8_0.gguf --ctx 131072 --attn exact --random-search 64 --sparse-layers 2-25 --topk 128"
C="$C --search-f16 --kv q8_0 -n 64 --prefill 0 -c 131200 -t 2 --json"
for v in new old; do
  rm -f $F; B=$NEW; [ $v = old ] && B=$OLD
  strace --seccomp-bpf -f -e trace=fdatasync -T $B bench $C --kv-file $F 2>&1 >/dev/null | grep -o "<[0-9.]*>" |
    tail -8 | tr '\n' ' ' | sed "s/^/$v fdatasync s: /"; echo
done; rm -f $F
