#!/usr/bin/python3
"""ctest check: `subq tokenize` on byte-level BPE ("gpt2") vocabularies == the
independent reference in bpe_ref.py (hand-written pre-split scanners, brute
force merges; no regex engine).

Vocabularies:
  * `subq synth --shape tiny-qwen2`   (pre qwen2, 320 tokens, subq's generator)
  * `subq synth --shape smollm2-135m` (pre smollm, 49152 tokens, subq's generator)
  * a vocabulary trained here by bpe_ref.train_bpe (3000 merges over the
    shared texts and the strings below, counted as words and, for the
    strings and 4 KiB of each text, also as raw 24-character chunks, so some
    merges cross word boundaries and a different cut changes the ids) plus test tokens: CONTROL specials,
    USER_DEFINED ones (one a prefix of another), an UNKNOWN token, whole-word
    NORMAL tokens no merge builds (Llama 3's ignore_merges rule; every Llama 3
    word of the strings below is one, so there the ids spell out the cuts),
    a duplicate text; written (with tiny-qwen2's weights and a matching
    embedding) once per pre-tokenizer: qwen2, llama-bpe, gpt2, smollm,
    gpt-4o, and without the key.

For each vocabulary: every mixed string below (English, CJK, emoji with ZWJ
sequences, digits of many lengths, contractions in both cases, code with
tabs and indentation, runs of spaces, \\r\\n, Unicode spaces, special tokens in
text, mixed-case words) and the first 64 KiB of each $SUBQ_SHARED/data/text/*.txt go through
`subq tokenize -f F --no-bos`; ids must equal the reference's exactly, and the
reference decoding of them must give the text back (strings that contain the
BOS/EOS text excepted: those decode to nothing). Also: BOS is prepended
exactly when the vocabulary says so, and an unknown pre is refused by name.
"""

import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
from bpe_ref import BpeRef, pre_split, to_symbols, train_bpe, write_gguf  # noqa: E402
from bpe_ref import TOKTYPE_CONTROL, TOKTYPE_NORMAL, TOKTYPE_UNKNOWN, TOKTYPE_USER_DEFINED  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402
from llama_ref import utf8_prefix  # noqa: E402

MAX_BYTES = 64 * 1024
N_MERGES = 3000

MIXED = [
    ("english", "The quick brown fox jumps over the lazy dog. It is a truth universally acknowledged, "
                "that a single man in possession of a good fortune, must be in want of a wife.\n"),
    ("contractions", "I'm sure you'll see they've done it; he'd say it's fine, we're here. "
                     "I'M SURE YOU'LL SEE THEY'VE DONE IT; HE'D SAY IT'S FINE, WE'RE HERE. "
                     "'tis 'Twas O'Neil's rock'n'roll ''quoted'' ' s 'S 'Ll 'lL x'"),
    ("digits", "0 1 12 123 1234 12345 123456 1234567 12345678901234567890 3.14159 1e-5 -42 "
               "1,000,000 2024-06-07 v2.0.1 ½ ² Ⅻ ٣٤٥ १२३ x1y22z333"),
    ("leading space digits", " 1 12  123   1234\n5678"),
    ("cjk", "日本語のテキスト、中文字符和한국어。東京は2024年に開催された「引用」です。"),
    ("emoji", "emoji 😀🎉 👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 keycap 1️⃣ heart ❤️ rainbow 🏳️‍🌈 end"),
    ("code", "def f(x):\n\tif x > 0:\n\t\treturn x ** 2  # square\n    else:\n        return -x\n\n"
             "int main(void) {\n    printf(\"%d\\n\", 42);\n    return 0;\n}\n"),
    ("spaces", "a  b   c    d     e\t\tf \t g\n \n  \n   x   "),
    ("crlf", "line one\r\nline two\r\n\r\nline four\r\n  \r\n"),
    ("specials", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>"
                 "<tool_call>{\"a\": 1}</tool_call> <|im <|image|>"),
    ("specials adjacent", "x<|im_start|><|im_end|>y <|im_start|> <|endoftext|>z<|endoftext|>"),
    ("unicode spaces", "a\u00a0b\u2003c\u3000d\u0085e\u180ef\u2028g\u2029h\x0b\x0ci\x1c\x1dj \u200b k"),
    # \s or not decides these splits: U+180E and U+0085 are \s for PCRE2, U+001C/U+001D
    # (Python isspace) and U+200B are not
    ("space classes", "a\u180e \nb x\u180e  y \x1c \nc x\x1c  y \u0085 \nd x\u0085  y \u200b \ne x\u200b  y "
                      "\u3000 \nf x\u3000  y\u2029 \ng"),
    ("mixed case", "HelloWorld iPhone McDONALD's XMLHttpRequest getHTTPResponse DON'T You'RE "
                   "\u00c9COLE \u00e9cole \u03a9mega \u03a9MEGA a\u00c9 !!\n\n/x a.\n/\n/b"),
    ("punctuation", "Hello!!! What?? (yes) [no] {maybe} — “quotes” ‘single’ … ... --- *** ¿Qué? ¡Sí!"),
    ("accents", "Café crème, naïve façade, Ångström, Ünïcödé résumé; ÀÉÎÕÜ àéîõü"),
    ("scripts", "Ελληνικά русский עברית العربية हिन्दी ไทย ქართული"),
    ("combining marks", "e\u0301 a\u0308 n\u0303 \u0915\u093f x\u0301\u0302y"),
    ("long words", "a" * 300 + " " + "ab" * 200 + " " + "日" * 100),
    ("empty", ""),
    ("single space", " "),
    ("newline", "\n"),
    ("controls", "\x00\x01\x7f tab\tend\x1b[0m"),
]

SPECIALS = [  # (text, type)
    ("<|endoftext|>", TOKTYPE_CONTROL),
    ("<|im_start|>", TOKTYPE_CONTROL),
    ("<|im_end|>", TOKTYPE_CONTROL),
    ("<tool_call>", TOKTYPE_USER_DEFINED),
    ("</tool_call>", TOKTYPE_USER_DEFINED),
    ("<|im", TOKTYPE_USER_DEFINED),      # a prefix of two CONTROL tokens: longest must win
]
WHOLE_WORDS = [" subquadratic", " 日本語", "123", "    ", " Lily"]  # NORMAL tokens, no merges


def parse_ids(out):
    try:
        return [int(x) for x in out.decode("ascii").split()]
    except (UnicodeDecodeError, ValueError) as e:
        raise rc.SubqError("subq tokenize stdout is not space-separated integers (%s): %r" % (e, out[:200]))


def tokenize(model_path, path, no_bos=True):
    return parse_ids(rc.run_subq(["tokenize", "-m", model_path, "-f", path] + (["--no-bos"] if no_bos else [])))


def compare_ids(ck, name, got, want, text=None):
    if got == want:
        ck.check(name, True, "%d tokens identical" % len(want))
        return False
    i = 0
    while i < min(len(got), len(want)) and got[i] == want[i]:
        i += 1
    detail = ("ids differ at index %d (subq %d tokens, ref %d tokens)\n  subq[%d:]: %s\n  ref[%d:]:  %s"
              % (i, len(got), len(want), i, got[i:i + 12], i, want[i:i + 12]))
    if text is not None and len(text) < 300:
        detail += "\n  text: %r" % text
    ck.check(name, False, detail)
    return True


def write_text(name, data):
    path = os.path.join(rc.tmp_dir(), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def corpus_files():
    files = sorted(glob.glob(os.path.join(rc.shared_dir(), "data", "text", "*.txt")))
    if not files:
        rc.die("no *.txt files in %s" % os.path.join(rc.shared_dir(), "data", "text"))
    out = []
    for src in files:
        with open(src, "rb") as f:
            data = utf8_prefix(f.read(), MAX_BYTES)
        out.append((os.path.basename(src), data))
    return out


def check_vocab(ck, label, model_path, corpus):
    try:
        ref = BpeRef(GGUFFile(model_path))
    except Exception as e:  # noqa: BLE001 - an unreadable vocabulary is a failure
        ck.check("%s: reference loads" % label, False, "%s: %s" % (type(e).__name__, e))
        return
    eos_texts = [ref.tokens[t] for t in (ref.bos, ref.eos) if t >= 0]
    items = [("mixed: " + n, s.encode("utf-8")) for n, s in MIXED] + \
            [("file " + n, d) for n, d in corpus]
    n_diff = 0
    for i, (name, data) in enumerate(items):
        text = data.decode("utf-8")
        path = write_text("bpe_%s_%02d.txt" % ("".join(c if c.isalnum() else "_" for c in label), i), data)
        want = ref.encode(text)
        cname = "%s %s (%d bytes)" % (label, name, len(data))
        got = ck.guarded(cname, tokenize, model_path, path)
        if got is None:
            continue
        if n_diff < 6:
            n_diff += compare_ids(ck, cname, got, want, text)
        else:
            ck.check(cname, got == want, "" if got == want else "ids differ (details suppressed)")
        if not any(t in text for t in eos_texts):
            back = ref.decode_bytes(got)
            ck.check("%s round trip %s" % (label, name), back == data,
                     "" if back == data else "decode(subq ids) != text (%d vs %d bytes)" % (len(back), len(data)))

    # BOS: prepended exactly when the vocabulary says so.
    path = write_text("bpe_bos.txt", b"Hello world")
    got = ck.guarded("%s with BOS" % label, tokenize, model_path, path, False)
    if got is not None:
        compare_ids(ck, "%s with BOS (add_bos %s)" % (label, ref.add_bos), got,
                    ref.encode("Hello world", add_bos=ref.add_bos))


def trained_vocab(corpus):
    texts = [d.decode("utf-8") for _, d in corpus] + [s for _, s in MIXED] * 20
    chunks = [d[:4096].decode("utf-8", "ignore") for _, d in corpus] + [s for _, s in MIXED] * 5
    tokens, merges = train_bpe(texts, "qwen2", N_MERGES, chunks)
    types = [TOKTYPE_NORMAL] * len(tokens)
    have = set(tokens)
    # Every Llama 3 word of the mixed strings as a token of its own: with
    # ignore_merges (pre llama-bpe) the ids then spell out the word cuts.
    words = sorted(set(w for _, s in MIXED for w in pre_split(s, "llama3") if len(w.encode()) <= 24))
    for w in WHOLE_WORDS + words:
        t = "".join(to_symbols(w))
        if t not in have:
            have.add(t)
            tokens.append(t)
            types.append(TOKTYPE_NORMAL)
    dup = "".join(to_symbols(" the"))
    if dup in have:
        tokens.append(dup)           # a later duplicate: its id wins
        types.append(TOKTYPE_NORMAL)
    tokens.append("<unk>")
    types.append(TOKTYPE_UNKNOWN)
    first_special = len(tokens)
    for s, ty in SPECIALS:
        tokens.append(s)
        types.append(ty)
    return tokens, types, merges, first_special


def write_model(path, base, tokens, types, merges, eos, pre):
    """A GGUF with base's architecture metadata and weights, the given
    vocabulary and a random token embedding of matching size."""
    kvs = []
    for k, v in base.metadata.items():
        if k.startswith("tokenizer."):
            continue
        ty = base.metadata_types[k]
        kvs.append((k, {4: "u32", 5: "i32", 6: "f32", 7: "bool", 8: "str"}[ty], v))
    kvs += [
        ("tokenizer.ggml.model", "str", "gpt2"),
        ("tokenizer.ggml.tokens", "arr_str", tokens),
        ("tokenizer.ggml.token_type", "arr_i32", types),
        ("tokenizer.ggml.merges", "arr_str", merges),
        ("tokenizer.ggml.bos_token_id", "u32", eos),
        ("tokenizer.ggml.eos_token_id", "u32", eos),
    ]
    if pre is not None:
        kvs.append(("tokenizer.ggml.pre", "str", pre))
    d = base.tensor_infos["token_embd.weight"].ne[0]
    rng = np.random.default_rng(7)
    tensors = []
    for name in base.tensor_order:
        ti = base.tensor_infos[name]
        if name == "token_embd.weight":
            emb = rng.standard_normal((len(tokens), d)).astype("<f4")
            tensors.append((name, [d, len(tokens)], 0, emb.tobytes()))
        elif name == "output.weight":
            raise ValueError("base model must have tied embeddings")
        else:
            tensors.append((name, list(ti.ne), ti.type, base.raw_bytes(name)))
    write_gguf(path, kvs, tensors)


def main():
    ck = rc.Checks("check_bpe")
    rc.subq_bin()
    corpus = corpus_files()

    # ---- subq's own synthetic vocabularies
    synth = {}
    for shape, wtype in (("tiny-qwen2", "f32"), ("smollm2-135m", "q8_0")):
        path = os.path.join(rc.tmp_dir(), "bpe_synth_%s.gguf" % shape)
        if os.path.exists(path):
            os.remove(path)
        if ck.guarded("synth %s" % shape, rc.run_subq,
                      ["synth", "--shape", shape, "--type", wtype, "-s", 5, "-o", path]) is not None:
            synth[shape] = path
    for shape, path in synth.items():
        md = GGUFFile(path).metadata
        ck.check("synth %s is a gpt2 vocabulary" % shape, md.get("tokenizer.ggml.model") == "gpt2",
                 "model %r pre %r" % (md.get("tokenizer.ggml.model"), md.get("tokenizer.ggml.pre")))
        check_vocab(ck, "synth %s (pre %s)" % (shape, md.get("tokenizer.ggml.pre")), path, corpus)

    # ---- a trained vocabulary under every pre-tokenizer
    if "tiny-qwen2" not in synth:
        rc.die("cannot build the trained-vocabulary models without the tiny-qwen2 weights")
    base = GGUFFile(synth["tiny-qwen2"])
    tokens, types, merges, first_special = trained_vocab(corpus)
    eos = first_special  # <|endoftext|>
    for pre in ("qwen2", "llama-bpe", "gpt2", "smollm", "gpt-4o", None):
        tag = pre or "none"
        path = os.path.join(rc.tmp_dir(), "bpe_trained_%s.gguf" % tag)
        write_model(path, base, tokens, types, merges, eos, pre)
        check_vocab(ck, "trained %d (pre %s)" % (len(tokens), tag), path, corpus)

    if "smollm2-135m" in synth:
        os.remove(synth["smollm2-135m"])  # 145 MB of scratch

    # ---- an unknown pre-tokenizer is refused by name
    path = os.path.join(rc.tmp_dir(), "bpe_trained_klingon.gguf")
    write_model(path, base, tokens, types, merges, eos, "klingon")
    try:
        rc.run_subq(["tokenize", "-m", path, "-p", "x"])
        ck.check("unknown pre refused", False, "subq accepted tokenizer.ggml.pre = 'klingon'")
    except rc.SubqError as e:
        ck.check("unknown pre refused", "klingon" in str(e) and "qwen2" in str(e),
                 "" if "klingon" in str(e) else str(e)[-300:])

    ck.finish()


if __name__ == "__main__":
    main()
