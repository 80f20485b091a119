#!/usr/bin/python3
"""ctest check: greedy output is bit-identical whatever the thread count.

README promises that `-t` never changes a result (the same -b, the same
machine): every split of work across threads leaves each sum in the same
order. Checked on the 4K fixture with a prompt of 2,200 tokens (four batches
of 512 and one of 152, where query blocks were once cut per thread), dense,
sparse exact with sparse prefill and HNSW with sparse prefill, at -t 1, 2
and 3 (more threads than this machine's cores): the 40 generated tokens and
the prompt's echo must match byte for byte across thread counts. -b is not
covered: other batch sizes run other kernels (README).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ck = rc.Checks("check_reproducible")
    model = rc.shared_file("models", "fixture-4k-29m-q8_0.gguf")
    search = os.path.join(REPO, "tests", "models", "fixture-4k-search-rope.gguf")
    with open(rc.shared_file("data", "text", "wikitext-2-raw.test.txt"), "rb") as f:
        text = f.read(40000)
    prompt = os.path.join(rc.tmp_dir(), "repro_prompt_%d.txt" % os.getpid())
    # a prompt of about 2,200 tokens: cut the text where its tokens reach that count
    lo, hi = 0, len(text)
    while hi - lo > 64:
        mid = (lo + hi) // 2
        n = len(rc.run_subq(["tokenize", "-m", model, "-p", text[:mid].decode("utf-8", "ignore")]).split())
        lo, hi = (mid, hi) if n < 2200 else (lo, mid)
    with open(prompt, "wb") as f:
        f.write(text[:lo].decode("utf-8", "ignore").encode())
    for name, extra in (("dense", []),
                        ("exact@64, sparse prefill", ["--search", search, "--topk", 64, "--sparse-prefill"]),
                        ("hnsw@64, sparse prefill", ["--search", search, "--select", "hnsw", "--topk", 64,
                                                     "--sparse-prefill"])):
        outs = {}
        for t in (1, 2, 3):
            outs[t] = ck.guarded("%s -t %d" % (name, t), rc.run_subq,
                                 ["generate", "-m", model, "-f", prompt, "-n", 40, "--temp", 0, "-t", t] + extra)
        if all(o is not None for o in outs.values()):
            ck.check("%s: -t 1, 2 and 3 give the same bytes" % name, outs[1] == outs[2] == outs[3],
                     "%d bytes; differ: %s" % (len(outs[1]), [t for t in (2, 3) if outs[t] != outs[1]]))
    os.unlink(prompt)
    ck.finish()


if __name__ == "__main__":
    main()
