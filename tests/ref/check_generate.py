#!/usr/bin/python3
"""ctest check: `subq generate --temp 0` == numpy reference greedy decoding.

stories260K, greedy from BOS, 200 tokens: subq's stdout minus the final
newline must equal the reference text byte for byte. The reference itself is
validated against the model's known behaviour (the story about Lily).
Also one prompted run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
from llama_ref import LlamaRef  # noqa: E402

KNOWN_START = b"Once upon a time, there was a little girl named Lily."


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def compare(ck, name, got_stdout, want):
    if not got_stdout.endswith(b"\n"):
        ck.check(name, False, "stdout does not end with a newline: %r" % got_stdout[-60:])
        return
    got = got_stdout[:-1]
    if got == want:
        ck.check(name, True, "%d bytes identical" % len(want))
        return
    i = first_diff(got, want)
    ck.check(name, False, "texts differ at byte %d (subq %d bytes, ref %d bytes)\n"
             "  subq: %r\n  ref:  %r" % (i, len(got), len(want), got[max(0, i - 40):i + 60],
                                         want[max(0, i - 40):i + 60]))


def main():
    ck = rc.Checks("check_generate")
    model_path = rc.shared_file("models", "stories260K.gguf")
    rc.subq_bin()
    ref = LlamaRef(model_path)

    # ---- 1. greedy from BOS, 200 tokens
    toks = ref.generate("", 200)
    want = ref.tok.decode_bytes(toks)
    ck.check("reference knows the model",
             want.startswith(KNOWN_START),
             "ref text starts %r" % want[:80])
    name = "generate from BOS, 200 tokens"
    out = ck.guarded(name, rc.run_subq, ["generate", "-m", model_path, "-p", "", "-n", 200, "--temp", 0])
    if out is not None:
        compare(ck, name, out, want)

    # ---- 2. prompted
    prompt = "Tom and his dog went to the"
    toks = ref.generate(prompt, 60)
    want = ref.tok.decode_bytes(toks)
    name = "generate with prompt %r, 60 tokens" % prompt
    out = ck.guarded(name, rc.run_subq, ["generate", "-m", model_path, "-p", prompt, "-n", 60, "--temp", 0])
    if out is not None:
        compare(ck, name, out, want)

    ck.finish()


if __name__ == "__main__":
    main()
