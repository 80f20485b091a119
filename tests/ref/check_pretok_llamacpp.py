#!/usr/bin/python3
"""ctest check: `subq tokenize` == llama.cpp's own tokenizer, id for id, under
each byte-level pre-tokenizer (tokenizer.ggml.pre gpt-4o, qwen2, llama-bpe,
gpt-2, smollm), on strings that stress the pre-split: mixed-case words
("HelloWorld", "iPhone", "McDONALD's"), contractions in both cases and after
upper-case runs, digit runs, punctuation runs with newlines and '/',
whitespace runs, letters with case outside ASCII ("ÉCOLE école Ωmega"),
combining marks, CJK, emoji, Unicode spaces, code, special tokens in text.

llama.cpp runs through node-llama-cpp's prebuilt CPU build
(tests/node/llamacpp_tokenize.mjs, vocabulary only); a missing
node-llama-cpp is a failure, not a skip.

The vocabulary is built so that the ids spell out the word cuts: BPE is
trained (bpe_ref.train_bpe, run to completion) on the words that several
plausible splits of the strings give (subq's reference split of each pre,
Llama 3's, GPT-2's, and GPT-4o with HF's Unicode case classes), so each such
word is one token, and two tokenizers that cut a string differently give
different ids. It is written with tiny-qwen2's weights (check_bpe's
write_model). Also checked: every word of the reference split of each pre
is one token (so the ids do spell the cuts), and bpe_ref.py's hand-written
splits give llama.cpp's ids too (check_bpe trusts them).

Not here: U+180E, which PCRE2's \\s matches and llama.cpp's does not (a
difference of every pattern, noted in src/tokenize/bpe.c); the pre names
"gpt2" (subq's alias, unknown to llama.cpp) and "default" or no key, which
subq reads as GPT-2's pattern while llama.cpp runs a four-regex pipeline of
its own there.
"""

import json
import os
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
from bpe_ref import BpeRef, match_gpt4o, pre_split, _scan, train_bpe  # noqa: E402
from bpe_ref import PRE_KINDS, TOKTYPE_CONTROL, TOKTYPE_NORMAL  # noqa: E402
from check_bpe import write_model  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402

PRES = ["gpt-4o", "qwen2", "llama-bpe", "gpt-2", "smollm"]
EOT = "<|endoftext|>"

STRINGS = [
    ("mixed case", "HelloWorld iPhone McDONALD's camelCaseString XMLHttpRequest getHTTPResponse ABCdef aBC "
                   "A a I'm OK. JSONParser iOS macOS eBay"),
    ("contractions", "'S 'll 'RE it's IT'S they'RE we'Ve I'M she'D don'T 'tis ''quoted'' O'Neil's x' "
                     "DON'T WON'T You're YOU'RE rock'n'roll ' s 'x 'LL'S"),
    ("digits", "1234567 12 123 1234 12345678901 3.14159 1,000,000 v2.0.1 x1y22z333 A1B2 ½ ² Ⅻ ٣٤٥ १२३"),
    ("punctuation and newlines", "!!\n\n/ a!\n/b ?\r\n/c ...\n\n\n// x.\n/\n/y :// end.\n\n"
                                 "(yes) [no] {maybe} — “quotes” … ¿Qué? ¡Sí!"),
    ("whitespace", "a  b   c\t\td \t e\n \n  \n   x   "),
    ("crlf", "line one\r\nline two\r\n\r\nline four\r\n  \r\n"),
    ("case outside ASCII", "ÉCOLE école Ωmega ΩMEGA École ÀÉÎõü aÉ Éa ΣΊΣΥΦΟΣ Straße STRASSE ǅemal ǄEMAL "
                           "ÉCOLE's Δx xΔ"),
    ("combining marks", "e\u0301 a\u0308b n\u0303 \u0915\u093f x\u0301\u0302y Cafe\u0301 CAFE\u0301S "
                        "\u0301A \u0301a"),
    ("scripts", "Ελληνικά русский Русский РУССКИЙ עברית العربية हिन्दी ไทย ქართული"),
    ("cjk", "日本語のテキスト、中文字符和한국어。東京は2024年に開催された「引用」です。"),
    ("emoji", "emoji 😀🎉 👍🏽 family 👨\u200d👩\u200d👧\u200d👦 flags 🇫🇷🇯🇵 keycap 1️⃣ heart ❤️ end"),
    ("unicode spaces", "a\u00a0b\u2003c\u3000d\u0085e\u2028g\u2029h\x0b\x0ci\x1c\x1dj \u200b k "
                       "x\u00a0 \ny x\u3000  y"),
    ("code", "def f(x):\n\tif x > 0:\n\t\treturn x ** 2  # square\n    else:\n        return -x\n\n"
             "int main(void) {\n    printf(\"%d\\n\", 42);\n}\n"),
    ("paths", "https://example.com/a/b?c=d\n/usr/bin\n//comment\n\t/x"),
    ("leading spaces", " Hello  World\n\nHELLO\tworld  "),
    ("controls", "\x01\x7f tab\tend\x1b[0m"),
    ("specials", EOT + "Hi" + EOT + " there " + EOT),
    ("one letter", "A"),
    ("one space", " "),
    ("one newline", "\n"),
]


def _hf_upper(c):
    return unicodedata.category(c) in ("Lu", "Lt", "Lm", "Lo") or unicodedata.category(c)[0] == "M"


def _hf_lower(c):
    return unicodedata.category(c) in ("Ll", "Lm", "Lo") or unicodedata.category(c)[0] == "M"


def candidate_words():
    """Words of several plausible splits of every string (the HF variant is
    approximate around marks; it only has to add words)."""
    words = set()
    for _, s in STRINGS:
        for part in s.split(EOT):
            for kind in ("gpt4o", "qwen2", "llama3", "gpt2", "smollm"):
                words.update(pre_split(part, kind))
            words.update(_scan(part, lambda t, i: match_gpt4o(t, i, _hf_upper, _hf_lower)))
    return sorted(w for w in words if w)


def build_vocab():
    words = candidate_words()
    tokens, merges = train_bpe([], "gpt2", 1 << 20, words, chunk=1 << 30)
    types = [TOKTYPE_NORMAL] * len(tokens)
    eos = len(tokens)
    tokens.append(EOT)
    types.append(TOKTYPE_CONTROL)
    return tokens, types, merges, eos


def subq_ids(model, text, i):
    path = os.path.join(rc.tmp_dir(), "pretok_%d.txt" % i)
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    out = rc.run_subq(["tokenize", "-m", model, "-f", path, "--no-bos"])
    return [int(x) for x in out.decode("ascii").split()]


def first_diff(a, b):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


def main():
    ck = rc.Checks("check_pretok_llamacpp")
    node_dir = rc.node_llamacpp_dir(ck)
    base_path = os.path.join(rc.tmp_dir(), "pretok_base.gguf")
    if ck.guarded("synth tiny-qwen2", rc.run_subq,
                  ["synth", "--shape", "tiny-qwen2", "--type", "f32", "-s", 5, "--force", "-o", base_path]) is None:
        ck.finish()
    base = GGUFFile(base_path)
    tokens, types, merges, eos = build_vocab()
    texts = [s for _, s in STRINGS]
    in_path = os.path.join(rc.tmp_dir(), "pretok_texts.json")
    with open(in_path, "w") as f:
        json.dump(texts, f)

    for pre in PRES:
        model = os.path.join(rc.tmp_dir(), "pretok_%s.gguf" % pre)
        write_model(model, base, tokens, types, merges, eos, pre)
        ref = BpeRef(GGUFFile(model))
        # The ids spell out the cuts: each word of the reference split is one token.
        kind = PRE_KINDS[pre]
        multi = [w for s in texts for part in s.split(EOT) for w in pre_split(part, kind)
                 if len(ref.encode(w)) != 1]
        ck.check("%s: every reference word is one token of the %d-token vocabulary" % (pre, len(tokens)),
                 not multi, "" if not multi else "%d are not, e.g. %r" % (len(multi), multi[:5]))

        out_path = os.path.join(rc.tmp_dir(), "pretok_%s.json" % pre)
        r = subprocess.run(["node", os.path.join(node_dir, "llamacpp_tokenize.mjs"), model, in_path, out_path],
                           capture_output=True, timeout=300)
        if not ck.check("%s: llama.cpp ran" % pre, r.returncode == 0, r.stderr.decode()[-2000:]):
            continue
        with open(out_path) as f:
            peer = json.load(f)
        n_same = n_ref = 0
        for i, (name, text) in enumerate(STRINGS):
            got = ck.guarded("%s %s: subq tokenize" % (pre, name), subq_ids, model, text, i)
            if got is None:
                continue
            want = peer[i]
            if got == want:
                n_same += 1
            else:
                k = first_diff(got, want)
                ck.check("%s %s: subq ids == llama.cpp ids" % (pre, name), False,
                         "differ at index %d (subq %d, llama.cpp %d tokens)\n  subq[%d:]: %s = %r\n"
                         "  llama.cpp[%d:]: %s = %r\n  text: %r"
                         % (k, len(got), len(want), k, got[k:k + 6], [tokens[t] for t in got[k:k + 6]],
                            k, want[k:k + 6], [tokens[t] for t in want[k:k + 6]], text))
            ours = ref.encode(text)
            if ours == want:
                n_ref += 1
            else:
                k = first_diff(ours, want)
                ck.check("%s %s: bpe_ref ids == llama.cpp ids" % (pre, name), False,
                         "differ at index %d: bpe_ref %s, llama.cpp %s" % (k, ours[k:k + 6], want[k:k + 6]))
        ck.check("%s: subq gives llama.cpp's ids exactly for %d of %d strings" % (pre, n_same, len(STRINGS)),
                 n_same == len(STRINGS), "")
        ck.check("%s: bpe_ref gives llama.cpp's ids exactly for %d of %d strings" % (pre, n_ref, len(STRINGS)),
                 n_ref == len(STRINGS), "")
        os.remove(model)
    os.remove(base_path)
    ck.finish()


if __name__ == "__main__":
    main()
