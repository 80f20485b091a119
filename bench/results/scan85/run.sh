#!/bin/bash
# $1 label, rest env
${BIN:-/work/main/build/subq} bench -m /work/shared/models/fixture-4k-29m-q8_0.gguf --search /work/main/tests/models/fixture-4k-search-rope.gguf --prefill-text /work/shared/data/text/wikitext-2-raw.test.txt --prefill-ctx ${CTX:-16384} --topk 64 --search-f16 -n 256 --kv f16 --far-pos group --attn exact --scan ${SCAN:-int4} -t ${T:-2} ${CONTEND:+--contend $CONTEND} --json 2>/dev/null > /tmp/b16_$1.json
python3 - "$1" <<'PY'
import json,sys
d=json.load(open('/tmp/b16_%s.json'%sys.argv[1]))
def walk(o,path=""):
    if isinstance(o,dict):
        for k,v in o.items(): walk(v,path+"."+k)
    elif isinstance(o,list):
        for i,v in enumerate(o): walk(v,path+"[%d]"%i)
    else:
        if any(s in path for s in ("decode_tok_s","tok_s","select_ms","t_select")): print(sys.argv[1],path,o)
walk(d)
PY
