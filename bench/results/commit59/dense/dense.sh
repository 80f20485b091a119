#!/bin/bash
# Dense prefill and decode of the Qwen3-0.6B shape at 512 and 8K: this binary (NEW) against the one before issue 59
# (PRE, 774ddf4), R alternated rounds. One batch of 512 (prefill), decode at 512 and 8192, then a real 8192-token prefill.
NEW=${NEW:-/work/main/build/subq}; PRE=${PRE:-/tmp/prewt/build/subq}; M=${M:-/tmp/qwen3-0.6b-q8_0.gguf}
for r in $(seq 1 ${R:-3}); do for v in ${ORDER:-new pre}; do
  B=$NEW; [ $v = pre ] && B=$PRE
  $B bench -m $M -t 2 --ctx 512,8192 -n 16 --json 2>/dev/null > ctx_${v}_$r.json
  $B bench -m $M -t 2 --prefill-ctx 8192 -n 4 --json 2>/dev/null > p8k_${v}_$r.json
  /usr/bin/python3 - "$r" "$v" <<'PY'
import json, sys
r, v = sys.argv[1:]
c = json.load(open(f'ctx_{v}_{r}.json')); p = json.load(open(f'p8k_{v}_{r}.json'))
pf = c['prefill'][0] if isinstance(c['prefill'], list) else c['prefill']
dec = {d['ctx']: round(d['decode_tok_s'], 2) for d in c['decode']}
pp = p['prefill'][0] if isinstance(p['prefill'], list) else p['prefill']
print(r, v, 'prefill512', round(pf.get('tok_s', pf.get('prefill_tok_s', -1)), 1), 'decode', dec,
      'prefill8192', {k: round(x, 1) for k, x in pp.items() if 'tok_s' in k})
PY
done; done
