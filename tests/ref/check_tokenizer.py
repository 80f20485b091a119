#!/usr/bin/python3
"""ctest check: `subq tokenize` == numpy reference SPM tokenizer (stories260K vocab).

  * each $SUBQ_SHARED/data/text/*.txt: first 256 KiB (cut back to a UTF-8
    character boundary), --no-bos, ids must match exactly;
  * edge strings (empty, spaces, newlines/tabs, accents, CJK, emoji, digits):
    ids must match, and the reference must round-trip decode(encode(s)) == s;
  * one string without --no-bos: subq must prepend BOS.
"""

import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
from llama_ref import LlamaRef, utf8_prefix  # noqa: E402

MAX_BYTES = 256 * 1024

EDGE_STRINGS = [
    ("empty", ""),
    ("single space", " "),
    ("two spaces", "  "),
    ("leading spaces", "   leading spaces"),
    ("trailing spaces", "trailing spaces   "),
    ("multiple spaces", "multiple    spaces  between   words"),
    ("only newline", "\n"),
    ("newlines and tabs", "line one\nline two\n\n\tindented\ttabs\t\r\nend\n"),
    ("leading newline", "\nstarts with a newline"),
    ("accented latin", "Café crème, naïve façade, Ångström, Ünïcödé résumé"),
    ("cjk", "日本語のテキスト、中文字符和한국어"),
    ("emoji", "emoji 😀🎉 👍🏽 family 👨‍👩‍👧"),
    ("digits", "0123456789 3.14159 1e-5 -42 1,000,000"),
    ("mixed", " Once upon a time, there was a little girl named Lily. 😀\n"),
]


def parse_ids(out):
    try:
        return [int(x) for x in out.decode("ascii").split()]
    except (UnicodeDecodeError, ValueError) as e:
        raise rc.SubqError("subq tokenize stdout is not space-separated integers (%s): %r" % (e, out[:200]))


def tokenize(model_path, path, no_bos):
    args = ["tokenize", "-m", model_path, "-f", path] + (["--no-bos"] if no_bos else [])
    return parse_ids(rc.run_subq(args))


def compare_ids(ck, name, got, want, text=None):
    if got == want:
        ck.check(name, True, "%d tokens identical" % len(want))
        return
    i = 0
    while i < min(len(got), len(want)) and got[i] == want[i]:
        i += 1
    detail = ("ids differ at index %d (subq %d tokens, ref %d tokens)\n  subq[%d:]: %s\n  ref[%d:]:  %s"
              % (i, len(got), len(want), i, got[i:i + 12], i, want[i:i + 12]))
    if text is not None and len(text) < 200:
        detail += "\n  text: %r" % text
    ck.check(name, False, detail)


def main():
    ck = rc.Checks("check_tokenizer")
    model_path = rc.shared_file("models", "stories260K.gguf")
    rc.subq_bin()
    ref = LlamaRef(model_path)
    tok = ref.tok

    # ---- corpus files
    files = sorted(glob.glob(os.path.join(rc.shared_dir(), "data", "text", "*.txt")))
    if not files:
        rc.die("no *.txt files in %s" % os.path.join(rc.shared_dir(), "data", "text"))
    for src in files:
        with open(src, "rb") as f:
            data = utf8_prefix(f.read(), MAX_BYTES)
        dst = os.path.join(rc.tmp_dir(), "tok_" + os.path.basename(src))
        with open(dst, "wb") as f:
            f.write(data)
        want = tok.encode(data.decode("utf-8"), add_bos=False)
        name = "file %s (%d bytes)" % (os.path.basename(src), len(data))
        got = ck.guarded(name, tokenize, model_path, dst, True)
        if got is not None:
            compare_ids(ck, name, got, want)

    # ---- edge strings
    for i, (name, s) in enumerate(EDGE_STRINGS):
        want = tok.encode(s, add_bos=False)
        back = tok.decode(want)
        back_bos = tok.decode(tok.encode(s, add_bos=True))
        ck.check("ref round trip: %s" % name, back == s and back_bos == s,
                 "decode(encode(s)) = %r, with BOS %r, s = %r" % (back, back_bos, s)
                 if not (back == s and back_bos == s) else "")
        dst = os.path.join(rc.tmp_dir(), "tok_edge_%02d.txt" % i)
        with open(dst, "wb") as f:
            f.write(s.encode("utf-8"))
        got = ck.guarded("edge: %s" % name, tokenize, model_path, dst, True)
        if got is not None:
            compare_ids(ck, "edge: %s" % name, got, want, s)

    # ---- BOS is added without --no-bos
    s = "Once upon a time"
    dst = os.path.join(rc.tmp_dir(), "tok_bos.txt")
    with open(dst, "wb") as f:
        f.write(s.encode("utf-8"))
    got = ck.guarded("with BOS", tokenize, model_path, dst, False)
    if got is not None:
        compare_ids(ck, "with BOS", got, tok.encode(s, add_bos=True), s)

    ck.finish()


if __name__ == "__main__":
    main()
